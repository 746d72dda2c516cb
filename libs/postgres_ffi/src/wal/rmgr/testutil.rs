//! Builders for records in tests: main data laid out field by field, as
//! the C structs put it.

use bytes::Bytes;
use utils::lsn::Lsn;

use super::super::image::BlockImage;
use super::super::{BlockTag, DecodedBlock, DecodedWalRecord};

/// The LSN every test record starts at (shown in error messages).
pub(crate) const TEST_LSN: Lsn = Lsn(0x0100_0028);

pub(crate) fn record(rmid: u8, info: u8, main: &[u8]) -> DecodedWalRecord {
    DecodedWalRecord {
        lsn: TEST_LSN,
        end_lsn: Lsn(TEST_LSN.0 + 64),
        xid: 0,
        info,
        rmid,
        prev_lsn: Lsn(0),
        toplevel_xid: None,
        origin: None,
        blocks: Vec::new(),
        main_data: Bytes::copy_from_slice(main),
    }
}

/// Block `id` of relation 1663/5/16384, fork `fork`, with or without an image.
pub(crate) fn block(id: u8, fork: u8, blkno: u32, with_image: bool) -> DecodedBlock {
    DecodedBlock {
        id,
        tag: BlockTag { spc_oid: 1663, db_oid: 5, rel_number: 16384, fork, blkno },
        will_init: false,
        image: with_image.then(|| BlockImage::uncompressed(Bytes::from(vec![0u8; crate::BLCKSZ]))),
        apply_image: with_image,
        data: Bytes::new(),
    }
}

/// Little-endian byte builder.
#[derive(Default)]
pub(crate) struct Le(pub Vec<u8>);

impl Le {
    pub(crate) fn new() -> Le {
        Le(Vec::new())
    }
    pub(crate) fn u8(mut self, v: u8) -> Le {
        self.0.push(v);
        self
    }
    pub(crate) fn u16(mut self, v: u16) -> Le {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn u32(mut self, v: u32) -> Le {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn i32(self, v: i32) -> Le {
        self.u32(v as u32)
    }
    pub(crate) fn u64(mut self, v: u64) -> Le {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn i64(self, v: i64) -> Le {
        self.u64(v as u64)
    }
    pub(crate) fn raw(mut self, b: &[u8]) -> Le {
        self.0.extend_from_slice(b);
        self
    }
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// Assert that `err` names the test LSN and contains `what`.
pub(crate) fn assert_err(err: super::super::WalDecodeError, what: &str) {
    assert_eq!(err.lsn, TEST_LSN, "{err}");
    let text = err.to_string();
    assert!(text.contains(&TEST_LSN.to_string()), "{text}");
    assert!(text.contains(what), "expected {what:?} in {text:?}");
}

/// Every proper prefix of `main` must be an error naming the LSN, never a panic.
pub(crate) fn assert_truncations_fail<T: std::fmt::Debug>(
    main: &[u8],
    decode: impl Fn(&[u8]) -> Result<T, super::super::WalDecodeError>,
) {
    for len in 0..main.len() {
        match decode(&main[..len]) {
            Err(e) => assert_eq!(e.lsn, TEST_LSN),
            Ok(v) => panic!("{len}-byte prefix of {} decoded as {v:?}", main.len()),
        }
    }
}
