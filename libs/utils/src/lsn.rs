//! `Lsn`: a PostgreSQL WAL position (a byte offset into the WAL stream).
//!
//! Printed and parsed as `X/X`: the high and low 32 bits in upper-case hex,
//! the form PostgreSQL itself uses. `Lsn::MAX` (all ones) means "latest" in
//! pagestream requests.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(pub u64);

/// Error from parsing the `X/X` text form.
#[derive(Debug, thiserror::Error)]
#[error("invalid LSN '{0}': expected two hex numbers separated by '/', e.g. 0/16B3748")]
pub struct LsnParseError(pub String);

impl Lsn {
    pub const INVALID: Lsn = Lsn(0);
    pub const MAX: Lsn = Lsn(u64::MAX);

    pub fn is_valid(self) -> bool {
        self != Lsn::INVALID
    }

    /// Round up to the next multiple of 8 (WAL records are 8-byte aligned).
    pub fn align(self) -> Lsn {
        Lsn((self.0 + 7) & !7)
    }

    pub fn checked_sub(self, other: u64) -> Option<Lsn> {
        self.0.checked_sub(other).map(Lsn)
    }

    /// Offset within a segment of `seg_size` bytes.
    pub fn segment_offset(self, seg_size: u64) -> u64 {
        self.0 % seg_size
    }

    /// The 16-digit upper-case hex form used in layer file names.
    pub fn to_hex16(self) -> String {
        format!("{:016X}", self.0)
    }

    pub fn from_hex16(s: &str) -> Result<Lsn, LsnParseError> {
        if s.len() != 16 {
            return Err(LsnParseError(s.to_string()));
        }
        u64::from_str_radix(s, 16).map(Lsn).map_err(|_| LsnParseError(s.to_string()))
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xffff_ffff)
    }
}

impl fmt::Debug for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for Lsn {
    type Err = LsnParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || LsnParseError(s.to_string());
        let (hi, lo) = s.split_once('/').ok_or_else(err)?;
        if hi.is_empty() || lo.is_empty() || hi.len() > 8 || lo.len() > 8 {
            return Err(err());
        }
        let hi = u32::from_str_radix(hi, 16).map_err(|_| err())?;
        let lo = u32::from_str_radix(lo, 16).map_err(|_| err())?;
        Ok(Lsn(((hi as u64) << 32) | lo as u64))
    }
}

impl From<u64> for Lsn {
    fn from(v: u64) -> Lsn {
        Lsn(v)
    }
}

impl std::ops::Add<u64> for Lsn {
    type Output = Lsn;
    fn add(self, rhs: u64) -> Lsn {
        Lsn(self.0.checked_add(rhs).expect("LSN overflow"))
    }
}

impl Serialize for Lsn {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Lsn {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trip() {
        let lsn = Lsn(0x1_016B_3748);
        assert_eq!(lsn.to_string(), "1/16B3748");
        assert_eq!("1/16B3748".parse::<Lsn>().unwrap(), lsn);
        assert_eq!("0/0".parse::<Lsn>().unwrap(), Lsn(0));
        assert_eq!(Lsn::MAX.to_string(), "FFFFFFFF/FFFFFFFF");
        for bad in ["", "1", "/1", "1/", "x/1", "1/2/3", "123456789/0"] {
            assert!(bad.parse::<Lsn>().is_err(), "{bad}");
        }
    }

    #[test]
    fn hex16_and_align() {
        assert_eq!(Lsn(0xAB).to_hex16(), "00000000000000AB");
        assert_eq!(Lsn::from_hex16("00000000000000AB").unwrap(), Lsn(0xAB));
        assert!(Lsn::from_hex16("AB").is_err());
        assert_eq!(Lsn(9).align(), Lsn(16));
        assert_eq!(Lsn(16).align(), Lsn(16));
    }
}
