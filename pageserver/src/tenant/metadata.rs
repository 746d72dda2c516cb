//! Timeline metadata: the durable facts of a timeline, in one small file
//! `timelines/<id>/metadata`, replaced atomically (temp, fsync, rename, fsync dir).
//!
//! Format (little-endian): magic "PSTM", version u16, pad u16,
//! disk_consistent_lsn u64, initial_lsn u64, pg_version u32, CRC-32C u32 of
//! the preceding bytes. A mismatch is an error naming the file.

use std::path::Path;

use anyhow::{ensure, Context};
use io_engine::IoEngine;
use utils::lsn::Lsn;

const MAGIC: &[u8; 4] = b"PSTM";
const VERSION: u16 = 1;
const LEN: usize = 4 + 2 + 2 + 8 + 8 + 4;

pub const METADATA_FILE: &str = "metadata";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimelineMetadata {
    /// Everything up to and including this LSN is in layer files.
    pub disk_consistent_lsn: Lsn,
    /// The timeline starts here; reads below it are refused.
    pub initial_lsn: Lsn,
    pub pg_version: u32,
}

impl TimelineMetadata {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(LEN + 4);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&[0, 0]);
        b.extend_from_slice(&self.disk_consistent_lsn.0.to_le_bytes());
        b.extend_from_slice(&self.initial_lsn.0.to_le_bytes());
        b.extend_from_slice(&self.pg_version.to_le_bytes());
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> anyhow::Result<TimelineMetadata> {
        ensure!(b.len() == LEN + 4, "metadata is {} bytes, expected {}", b.len(), LEN + 4);
        ensure!(&b[..4] == MAGIC, "bad magic");
        let stored = u32::from_le_bytes(b[LEN..].try_into().unwrap());
        let computed = crc32c::crc32c(&b[..LEN]);
        ensure!(
            stored == computed,
            "checksum mismatch: stored {stored:#x}, computed {computed:#x}"
        );
        let version = u16::from_le_bytes([b[4], b[5]]);
        ensure!(version == VERSION, "unsupported metadata version {version}");
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        Ok(TimelineMetadata {
            disk_consistent_lsn: Lsn(u64_at(8)),
            initial_lsn: Lsn(u64_at(16)),
            pg_version: u32::from_le_bytes(b[24..28].try_into().unwrap()),
        })
    }

    pub async fn load(engine: &IoEngine, dir: &Path) -> anyhow::Result<TimelineMetadata> {
        let path = dir.join(METADATA_FILE);
        let read = async {
            let file = engine.open(&path, io_engine::OpenMode::READ).await?;
            let len = file.len().await? as usize;
            // Anything longer than a metadata file is corrupt; decode says so.
            let len = len.min(4096);
            let (buf, res) =
                file.read_exact_at(io_engine::AlignedBuf::with_capacity(len), 0, len).await;
            res.map(|_| buf)
        };
        let b = read.await.with_context(|| format!("read {}", path.display()))?;
        Self::decode(&b).with_context(|| format!("timeline metadata {} is corrupt", path.display()))
    }

    pub async fn persist(&self, engine: &IoEngine, dir: &Path) -> anyhow::Result<()> {
        let path = dir.join(METADATA_FILE);
        engine
            .write_file_durably(&path, &self.encode())
            .await
            .with_context(|| format!("persist {}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_corruption() {
        let m = TimelineMetadata {
            disk_consistent_lsn: Lsn(0x1234),
            initial_lsn: Lsn(0x10),
            pg_version: 15,
        };
        let mut b = m.encode();
        assert_eq!(TimelineMetadata::decode(&b).unwrap(), m);
        b[9] ^= 1;
        assert!(TimelineMetadata::decode(&b).unwrap_err().to_string().contains("checksum"));
        assert!(TimelineMetadata::decode(&b[..10]).is_err());
    }
}
