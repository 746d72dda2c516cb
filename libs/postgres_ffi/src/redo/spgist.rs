//! SP-GiST index records (`RM_SPGIST_ID`). Not redone natively yet: every
//! record kind is `Fault::Unsupported` (issue 29 fills this module in).

use super::{Ctx, Fault};

pub(crate) fn redo(_page: &mut [u8], ctx: &Ctx) -> Result<(), Fault> {
    Err(Fault::Unsupported(format!("SP-GiST record (info {:#04x})", ctx.rec.info)))
}

/// Whether the bytes of this page below `pd_lower` are line pointers
/// (`apply` checks them); pages holding other metadata there get the
/// header check only.
pub(crate) fn has_line_pointers(_page: &[u8]) -> bool {
    true
}
