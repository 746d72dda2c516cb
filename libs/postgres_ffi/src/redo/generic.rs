//! placeholder: filled by its owner
use super::{Ctx, Fault};

pub(crate) fn redo(_page: &mut [u8], ctx: &Ctx) -> Result<(), Fault> {
    Err(Fault::Unsupported(format!("record kind {:#04x}", ctx.rec.info)))
}
