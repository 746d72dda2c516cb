//! Tenant and timeline ids: 16 random bytes, written as 32 lowercase hex digits.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::quote::quote;

/// Error from parsing the 32-hex-digit text form of an id.
/// Holds the offending text already quoted (a bounded prefix, see `quote`).
#[derive(Debug, thiserror::Error)]
#[error("invalid id {0}: expected 32 hex digits")]
pub struct IdParseError(pub String);

macro_rules! id_type {
    ($name:ident, $doc:literal) => {
        #[doc = $doc]
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub [u8; 16]);

        impl $name {
            pub fn generate() -> Self {
                $name(rand::random())
            }
            pub fn as_bytes(&self) -> &[u8; 16] {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&hex::encode(self.0))
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(self, f)
            }
        }

        impl FromStr for $name {
            type Err = IdParseError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                let mut out = [0u8; 16];
                if s.len() != 32 {
                    return Err(IdParseError(quote(s).to_string()));
                }
                hex::decode_to_slice(s, &mut out)
                    .map_err(|_| IdParseError(quote(s).to_string()))?;
                Ok($name(out))
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

id_type!(TenantId, "Identifies a tenant: one PostgreSQL cluster's pages.");
id_type!(TimelineId, "Identifies a timeline (a branch of WAL history) within a tenant.");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let id = TenantId::generate();
        let s = id.to_string();
        assert_eq!(s.len(), 32);
        assert_eq!(s, s.to_lowercase());
        assert_eq!(s.parse::<TenantId>().unwrap(), id);
        assert!("abc".parse::<TimelineId>().is_err());
        assert!("zz".repeat(16).parse::<TimelineId>().is_err());
    }
}
