//! The index of format versions 1 and 2: a flat list of entries
//! `(key 18 B BE, lsn u64 BE, blobref u64 BE)` sorted by (key, lsn), then a
//! CRC-32C (LE) of the entries. Such a file's whole index is decoded into
//! memory at load (34 B per entry); lookups are a binary search. Only read:
//! new layers are version 3 (tests write legacy files with `encode`).

use anyhow::{bail, ensure};
use pageserver_api::key::{CompactKey, Key, KEY_SIZE};
use utils::lsn::Lsn;

use super::super::BlobRef;
use super::header::Header;

pub(super) const ENTRY_BYTES: usize = KEY_SIZE + 8 + 8;

pub(super) struct LegacyIndex {
    /// Sorted by (key, lsn), no duplicates.
    entries: Vec<(CompactKey, Lsn, BlobRef)>,
}

/// Bytes of a legacy index region of `entry_count` entries (CRC included).
pub(super) fn index_bytes(entry_count: u64) -> u64 {
    entry_count * ENTRY_BYTES as u64 + 4
}

impl LegacyIndex {
    /// Decode and check the index region (`index_bytes` long) of a file
    /// with header `h`.
    pub fn decode(bytes: &[u8], h: &Header) -> anyhow::Result<LegacyIndex> {
        let entries_len = bytes.len() - 4;
        let stored = u32::from_le_bytes(bytes[entries_len..].try_into().unwrap());
        let computed = crc32c::crc32c(&bytes[..entries_len]);
        ensure!(
            stored == computed,
            "index checksum mismatch: stored {stored:#x}, computed {computed:#x}"
        );
        let mut entries = Vec::with_capacity(h.entry_count as usize);
        for e in bytes[..entries_len].chunks_exact(ENTRY_BYTES) {
            let key = Key::from_be_bytes(e[..KEY_SIZE].try_into().unwrap()).to_compact();
            let lsn = Lsn(u64::from_be_bytes(e[KEY_SIZE..KEY_SIZE + 8].try_into().unwrap()));
            let blob = BlobRef::from_raw(u64::from_be_bytes(e[KEY_SIZE + 8..].try_into().unwrap()));
            if blob.end() > h.values_len || !h.lsn_range.contains(&lsn) {
                bail!(
                    "index entry for {} at {lsn} points outside the layer",
                    Key::from_compact(key)
                );
            }
            entries.push((key, lsn, blob));
        }
        ensure!(
            entries.windows(2).all(|w| (w[0].0, w[0].1) < (w[1].0, w[1].1)),
            "index not sorted"
        );
        Ok(LegacyIndex { entries })
    }

    /// Same contract as `LayerFile::collect`.
    pub fn collect(
        &self,
        key: CompactKey,
        lsn: Lsn,
        floor: Lsn,
        out: &mut Vec<(Lsn, BlobRef)>,
    ) -> bool {
        // Entries of `key` with LSN <= lsn end just before the partition
        // point of `(k, l) <= (key, lsn)`.
        let end = self.entries.partition_point(|(k, l, _)| (*k, *l) <= (key, lsn));
        for &(k, l, blob) in self.entries[..end].iter().rev() {
            if k != key || l <= floor {
                break;
            }
            out.push((l, blob));
            if blob.will_init() {
                return true;
            }
        }
        false
    }

    pub fn entries(&self) -> &[(CompactKey, Lsn, BlobRef)] {
        &self.entries
    }
}

/// The index region of a legacy file: entries, then their CRC (tests and
/// benches only: the daemon writes version 3).
#[cfg(any(test, feature = "testing"))]
pub(super) fn encode(entries: &[(CompactKey, Lsn, BlobRef)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.len() * ENTRY_BYTES + 4);
    for (k, lsn, blob) in entries {
        out.extend_from_slice(&Key::from_compact(*k).to_be_bytes());
        out.extend_from_slice(&lsn.0.to_be_bytes());
        out.extend_from_slice(&blob.raw().to_be_bytes());
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

#[cfg(any(test, feature = "testing"))]
impl super::LayerFile {
    /// Write a copy of this version 3 delta layer into `dir` in format
    /// `version` (1 or 2), as older daemons wrote it: same values, flat
    /// index, legacy header. For tests and benches of the legacy path.
    pub async fn write_legacy_copy(
        &self,
        version: u16,
        dir: &std::path::Path,
    ) -> anyhow::Result<std::path::PathBuf> {
        use super::header::Layout;
        let layout = match version {
            1 => Layout::V1,
            2 => Layout::V2,
            v => bail!("format version {v} has no flat index"),
        };
        let bytes = self.engine.read_file(&self.path, self.file_size as usize).await?;
        let mut h = Header::decode(&bytes[..super::HEADER_READ_BYTES as usize])?;
        ensure!(h.tree.is_some() && h.kind == super::LayerKind::Delta, "not a v3 delta layer");
        let values = &bytes[h.layout.values_offset() as usize..][..h.values_len as usize];
        let mut entries = Vec::new();
        let mut cursor = self.entry_cursor();
        while let Some(leaf) = cursor.next_leaf().await? {
            entries.extend(leaf);
        }
        (h.layout, h.tree) = (layout, None);
        h.index_offset = layout.index_offset(h.values_len);
        let mut out = h.encode();
        out.extend_from_slice(values);
        out.resize(h.index_offset as usize, 0);
        out.extend_from_slice(&encode(&entries));
        let end = layout.file_size(h.index_offset, index_bytes(entries.len() as u64));
        out.resize(end as usize, 0);
        let path = dir.join(self.name.to_string());
        self.engine.write_file_durably(&path, &out).await?;
        Ok(path)
    }
}
