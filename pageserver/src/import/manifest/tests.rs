//! The manifest checks with real data: manifests written by PostgreSQL 15
//! (version 1) and 18 (version 2) for a tiny `initdb -k` cluster, and five
//! files of the 15 backup (`pageserver/testdata/manifest`, made with
//! `pg_basebackup -Ft -X none --manifest-checksums=CRC32C`).

use bytes::Bytes;
use futures::Stream;

use super::*;
use crate::import::tar_reader::TarReader;

fn testdata(name: &str) -> Vec<u8> {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/manifest").join(name);
    let compressed = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    zstd::decode_all(&compressed[..]).unwrap()
}

/// The backup's start LSN (`backup_label`: START WAL LOCATION 0/2000028).
const START_LSN: Lsn = Lsn(0x2000028);
const REL: &str = "base/5/1259";

/// The real manifest cut down to the files of `pg15-files.tar`, its
/// checksum recomputed; `crc_of` overrides the CRC of one file.
fn manifest_for_files(crc_of: Option<(&str, u32)>) -> Vec<u8> {
    let full = String::from_utf8(testdata("pg15.backup_manifest.zst")).unwrap();
    let keep = ["backup_label", "PG_VERSION", REL, "base/5/1259_vm", "global/pg_control"];
    let mut lines: Vec<String> = Vec::new();
    for line in full.lines() {
        let path = line.split("\"Path\": \"").nth(1).map(|r| r.split('"').next().unwrap());
        match path {
            Some(p) if !keep.contains(&p) => continue,
            Some(p) => {
                let mut l = line.to_string();
                if let Some((_, crc)) = crc_of.filter(|(q, _)| *q == p) {
                    let at = l.find("\"Checksum\": \"").unwrap() + 13;
                    l.replace_range(at..at + 8, &hex::encode(crc.to_le_bytes()));
                }
                lines.push(l);
            }
            None if line.starts_with("\"Manifest-Checksum\"") => break,
            None => lines.push(line.to_string()),
        }
    }
    // The last kept file line must not end with a comma.
    let last_file = lines.iter().rposition(|l| l.contains("\"Path\"")).unwrap();
    lines[last_file] = lines[last_file].trim_end_matches(',').to_string();
    let mut text = lines.join("\n") + "\n";
    let sum = hex::encode(Sha256::digest(text.as_bytes()));
    text.push_str(&format!("\"Manifest-Checksum\": \"{sum}\"}}\n"));
    text.into_bytes()
}

fn stream_of(
    data: Vec<u8>,
    chunk: usize,
) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Unpin {
    let chunks: Vec<_> = data.chunks(chunk).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
    futures::stream::iter(chunks)
}

/// Reads the tar as the import does (some entries read, others skipped).
async fn observe(tar: Vec<u8>, chunk: usize) -> FileDigests {
    let digests = FileDigests::new(START_LSN);
    let mut r = TarReader::with_observer(stream_of(tar, chunk), digests.observer());
    while let Some(e) = r.next_entry().await.unwrap() {
        if e.path == REL {
            while !r.read_data(BLCKSZ).await.unwrap().is_empty() {}
        }
    }
    digests
}

/// Offset in the tar of byte `at` of `path`'s data (ustar: 512-byte blocks).
fn data_offset(tar: &[u8], path: &str, at: usize) -> usize {
    let mut off = 0;
    loop {
        let h = &tar[off..off + 512];
        let name = String::from_utf8_lossy(&h[..100]).trim_end_matches('\0').to_string();
        let size = usize::from_str_radix(String::from_utf8_lossy(&h[124..135]).trim(), 8).unwrap();
        if name == path {
            return off + 512 + at;
        }
        off += 512 + size.div_ceil(512) * 512;
    }
}

fn checks<'a>(digests: &'a FileDigests, manifest: &'a [u8]) -> BackupChecks<'a> {
    BackupChecks { digests, manifest: Some(manifest), system_identifier: 0 }
}

#[test]
fn real_manifests_of_versions_1_and_2_parse() {
    let v1 = BackupManifest::parse(&testdata("pg15.backup_manifest.zst")).unwrap();
    assert_eq!((v1.version, v1.system_identifier, v1.files.len()), (1, None, 965));
    let v2 = BackupManifest::parse(&testdata("pg18.backup_manifest.zst")).unwrap();
    assert_eq!(
        (v2.version, v2.system_identifier, v2.files.len()),
        (2, Some(7712908065632256710), 969)
    );
    for (m, text) in [(&v1, b"15\n"), (&v2, b"18\n")] {
        let f = m.files.iter().find(|f| f.path == "PG_VERSION").unwrap();
        assert_eq!(
            (f.size, f.crc32c),
            (3, crc32c::crc32c(text)),
            "PG_VERSION's CRC-32C as PostgreSQL computes it"
        );
    }
}

#[test]
fn a_changed_manifest_fails_its_own_checksum() {
    let mut text = testdata("pg15.backup_manifest.zst");
    let at = text.windows(11).position(|w| w == b"\"PG_VERSION").unwrap() + 30;
    text[at] ^= 0x01;
    let e = BackupManifest::parse(&text).unwrap_err().to_string();
    assert!(e.contains("Manifest-Checksum") && e.contains("corrupted"), "{e}");
    let e = BackupManifest::parse(&text[..text.len() - 40]).unwrap_err().to_string();
    assert!(e.contains("truncated"), "{e}");
}

#[test]
fn a_manifest_without_crc32c_is_refused() {
    let text = String::from_utf8(manifest_for_files(None)).unwrap();
    let sha =
        text.replace("\"Checksum-Algorithm\": \"CRC32C\"", "\"Checksum-Algorithm\": \"SHA256\"");
    let body = &sha[..sha.find("\"Manifest-Checksum\"").unwrap()];
    let sha = format!(
        "{body}\"Manifest-Checksum\": \"{}\"}}\n",
        hex::encode(Sha256::digest(body.as_bytes()))
    );
    let e = BackupManifest::parse(sha.as_bytes()).unwrap_err().to_string();
    assert!(e.contains("SHA256, not CRC32C"), "{e}");
}

#[tokio::test]
async fn real_files_match_their_manifest_in_any_chunking() {
    let tar = testdata("pg15-files.tar.zst");
    let manifest = manifest_for_files(None);
    for chunk in [1000, 8192, 1 << 20] {
        let digests = observe(tar.clone(), chunk).await;
        let v = checks(&digests, &manifest).verify().unwrap();
        assert_eq!((v.files, v.manifest_version), (5, 1), "chunk {chunk}");
        assert_eq!(
            v.pages_checked, 15,
            "pg_control has data checksums: all 14 + 1 pages are below the start LSN"
        );
    }
    // The full manifest lists files this tar lacks.
    let digests = observe(tar, 4096).await;
    let e =
        checks(&digests, &testdata("pg15.backup_manifest.zst")).verify().unwrap_err().to_string();
    assert!(
        e.contains("'global/1261' is in the manifest but not in the tar") && e.contains("more"),
        "{e}"
    );
}

#[tokio::test]
async fn a_flipped_byte_is_named_by_file_and_block() {
    let mut tar = testdata("pg15-files.tar.zst");
    let at = data_offset(&tar, REL, 3 * BLCKSZ + 5000);
    tar[at] ^= 0x10;
    let digests = observe(tar, 3000).await;
    let e = checks(&digests, &manifest_for_files(None)).verify().unwrap_err();
    assert!(matches!(e, VerifyError::Corrupt(_)), "{e:?}");
    let e = e.to_string();
    assert!(e.contains(&format!("'{REL}' has CRC-32C")) && e.contains("the manifest says"), "{e}");

    // A manifest that agrees with the flipped bytes: the page checksum still catches it.
    let crc = digests.files()[REL].crc32c;
    let e =
        checks(&digests, &manifest_for_files(Some((REL, crc)))).verify().unwrap_err().to_string();
    assert_eq!(e, format!("1 relation page(s) fail their data checksum: '{REL}' block 3"));
}

#[tokio::test]
async fn pages_written_during_the_backup_are_not_checked() {
    let mut tar = testdata("pg15-files.tar.zst");
    let at = data_offset(&tar, REL, 3 * BLCKSZ + 5000);
    tar[at] ^= 0x10;
    let digests = FileDigests::new(Lsn(0x1000000)); // every page is newer
    let mut r = TarReader::with_observer(stream_of(tar, 8192), digests.observer());
    while r.next_entry().await.unwrap().is_some() {}
    let crc = digests.files()[REL].crc32c;
    let v = checks(&digests, &manifest_for_files(Some((REL, crc)))).verify().unwrap();
    assert_eq!(v.pages_checked, 0);
}

#[tokio::test]
async fn the_system_identifier_of_a_version_2_manifest_must_match() {
    let text = testdata("pg18.backup_manifest.zst");
    let digests = FileDigests::new(START_LSN);
    let c = BackupChecks { digests: &digests, manifest: Some(&text), system_identifier: 1 };
    let e = c.verify().unwrap_err().to_string();
    assert_eq!(
        e,
        "backup manifest: it is of cluster 7712908065632256710, the primary is cluster 1"
    );
    let c = BackupChecks { digests: &digests, manifest: None, system_identifier: 1 };
    assert!(c.verify().unwrap_err().to_string().contains("sent none"));
}
