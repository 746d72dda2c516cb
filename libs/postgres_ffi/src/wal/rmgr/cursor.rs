//! A bounds-checked little-endian reader over a record's main data. Every
//! read names the field it wants, so a short record's error says what was
//! missing, where, and in which record (LSN).

use utils::lsn::Lsn;

use super::super::{DecodedWalRecord, WalDecodeError};

pub(crate) struct Cursor<'a> {
    lsn: Lsn,
    /// Record kind for messages, e.g. "Transaction COMMIT".
    what: &'static str,
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(rec: &'a DecodedWalRecord, what: &'static str) -> Cursor<'a> {
        Cursor { lsn: rec.lsn, what, buf: &rec.main_data, pos: 0 }
    }

    /// An error about this record.
    pub(crate) fn error(&self, msg: impl std::fmt::Display) -> WalDecodeError {
        WalDecodeError { lsn: self.lsn, msg: format!("{}: {msg}", self.what) }
    }

    /// Offset of the next byte in the main data.
    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub(crate) fn bytes(&mut self, n: usize, field: &str) -> Result<&'a [u8], WalDecodeError> {
        if n > self.remaining() {
            return Err(self.error(format_args!(
                "main data is {} bytes, {field} needs {n} at offset {}",
                self.buf.len(),
                self.pos
            )));
        }
        let b = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(b)
    }

    pub(crate) fn skip(&mut self, n: usize, field: &str) -> Result<(), WalDecodeError> {
        self.bytes(n, field).map(|_| ())
    }

    fn array<const N: usize>(&mut self, field: &str) -> Result<[u8; N], WalDecodeError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(N, field)?);
        Ok(a)
    }

    pub(crate) fn u8(&mut self, field: &str) -> Result<u8, WalDecodeError> {
        Ok(self.array::<1>(field)?[0])
    }

    pub(crate) fn u32(&mut self, field: &str) -> Result<u32, WalDecodeError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    pub(crate) fn i32(&mut self, field: &str) -> Result<i32, WalDecodeError> {
        Ok(i32::from_le_bytes(self.array(field)?))
    }

    pub(crate) fn i64(&mut self, field: &str) -> Result<i64, WalDecodeError> {
        Ok(i64::from_le_bytes(self.array(field)?))
    }

    /// An `int` element count followed by `count` elements of
    /// `elem_len` bytes: rejects a negative count and one whose elements
    /// would run past the main data (so callers may allocate `count`).
    pub(crate) fn count(&mut self, elem_len: usize, field: &str) -> Result<usize, WalDecodeError> {
        let n = self.i32(field)?;
        self.check_count(n, elem_len, field)
    }

    /// Check a count read elsewhere (see [`Cursor::count`]).
    pub(crate) fn check_count(
        &self,
        n: i32,
        elem_len: usize,
        field: &str,
    ) -> Result<usize, WalDecodeError> {
        let Ok(n) = usize::try_from(n) else {
            return Err(self.error(format_args!("{field} is negative ({n})")));
        };
        match n.checked_mul(elem_len) {
            Some(len) if len <= self.remaining() => Ok(n),
            _ => Err(self.error(format_args!(
                "{field} is {n} ({elem_len} bytes each) but only {} bytes follow at offset {}",
                self.remaining(),
                self.pos
            ))),
        }
    }

    /// The end of a record whose main data PostgreSQL registers as exactly
    /// the fields read: bytes left over mean another version's layout.
    pub(crate) fn finish(&self) -> Result<(), WalDecodeError> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(self.error(format_args!(
                "{n} bytes left after the last field (main data is {} bytes)",
                self.buf.len()
            ))),
        }
    }

    /// A NUL-terminated string (the terminator is consumed, not returned).
    pub(crate) fn cstr(&mut self, field: &str) -> Result<&'a [u8], WalDecodeError> {
        let rest = &self.buf[self.pos..];
        let Some(len) = rest.iter().position(|&b| b == 0) else {
            return Err(
                self.error(format_args!("{field} at offset {} has no terminating NUL", self.pos))
            );
        };
        self.pos += len + 1;
        Ok(&rest[..len])
    }
}
