//! Layouts against real clusters (PostgreSQL 15 and 16 here: `initdb` and
//! `pg_controldata` of each), and round trips for every version.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;

fn sample(v: PgMajorVersion) -> ControlFileData {
    ControlFileData {
        system_identifier: 7_123_456_789,
        pg_control_version: pg_control_version(v),
        catalog_version_no: 202_209_061,
        state: DB_IN_PRODUCTION,
        time: 1_700_000_000,
        checkpoint: 0x1_6000_0028,
        checkpoint_copy: CheckPoint {
            redo: 0x1_6000_0028,
            this_timeline_id: 1,
            prev_timeline_id: 1,
            full_page_writes: true,
            wal_level: if v >= PgMajorVersion::V17 { 1 } else { 0 },
            next_xid: (1 << 32) | 742,
            next_oid: 24576,
            next_multi: 1,
            oldest_xid: 716,
            oldest_xid_db: 1,
            oldest_multi: 1,
            oldest_multi_db: 1,
            time: 1_700_000_000,
            ..CheckPoint::default()
        },
        wal_level: 1,
        max_connections: 100,
        max_align: 8,
        float_format: 1234567.0,
        blcksz: 8192,
        relseg_size: 131072,
        xlog_blcksz: 8192,
        xlog_seg_size: 16 << 20,
        name_data_len: 64,
        index_max_keys: 32,
        toast_max_chunk_size: 1996,
        loblksize: 2048,
        float8_by_val: true,
        data_checksum_version: 1,
        default_char_signedness: v >= PgMajorVersion::V18,
        mock_authentication_nonce: [9; 32],
        ..ControlFileData::default()
    }
}

#[test]
fn every_version_round_trips_and_checks_its_crc() {
    for v in PgMajorVersion::ALL {
        let c = sample(v);
        let b = c.encode(v);
        assert_eq!(b.len(), PG_CONTROL_FILE_SIZE);
        assert_eq!(ControlFileData::decode(&b, v).unwrap(), c, "{v:?}");
        assert_eq!(
            u32::from_le_bytes(b[crc_offset(v)..crc_offset(v) + 4].try_into().unwrap()),
            crc32c::crc32c(&b[..crc_offset(v)])
        );
        let mut bad = b.clone();
        bad[33] ^= 1;
        assert!(matches!(ControlFileData::decode(&bad, v), Err(ControlFileError::Checksum { .. })));
        assert!(matches!(ControlFileData::decode(&b[..512], v), Err(ControlFileError::Size(512))));
    }
    // A 17 file is not a 15 one: its control version says so.
    let b17 = sample(PgMajorVersion::V17).encode(PgMajorVersion::V17);
    assert!(matches!(
        ControlFileData::decode(&b17, PgMajorVersion::V15),
        Err(ControlFileError::ControlVersion { found: 1700, .. })
    ));
    // 18's nonce moved by one byte for default_char_signedness.
    let b18 = sample(PgMajorVersion::V18).encode(PgMajorVersion::V18);
    assert_eq!((b18[256], b18[257]), (1, 9));
}

#[test]
fn checkpoint_rewrite() {
    let v = PgMajorVersion::V16;
    let c = sample(v).for_checkpoint_at(0x2_0000_0100, 0x2_0000_0100);
    let d = ControlFileData::decode(&c.encode(v), v).unwrap();
    assert_eq!(
        (d.checkpoint, d.checkpoint_copy.redo, d.state),
        (0x2_0000_0100, 0x2_0000_0100, DB_SHUTDOWNED)
    );
}

/// `bin` of PostgreSQL `major` if it is installed here.
fn pg_bin(major: u32) -> Option<PathBuf> {
    let candidates = match major {
        15 => vec![PathBuf::from("/usr/lib/postgresql/15/bin")],
        16 => vec![
            std::env::var_os("PG16_BIN_DIR").map(PathBuf::from).unwrap_or_default(),
            PathBuf::from("/opt/pageserver-tests/pg16/pgserver/pginstall/bin"),
        ],
        _ => vec![],
    };
    candidates.into_iter().find(|d| d.join("initdb").exists() && d.join("pg_controldata").exists())
}

/// `initdb` a cluster (as the `postgres` user when we are root) and return
/// its directory.
fn initdb(bin: &Path, checksums: bool) -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix("ffi-initdb").tempdir_in("/tmp").unwrap();
    let data = dir.path().join("data");
    let as_root = unsafe_is_root();
    if as_root {
        let ok =
            Command::new("chown").args(["postgres:postgres"]).arg(dir.path()).status().unwrap();
        assert!(ok.success());
    }
    let mut cmd = if as_root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(bin.join("initdb"));
        c
    } else {
        Command::new(bin.join("initdb"))
    };
    cmd.arg("-D").arg(&data).args(["-U", "postgres", "--no-sync"]);
    if checksums {
        cmd.arg("--data-checksums");
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "initdb: {}", String::from_utf8_lossy(&out.stderr));
    dir
}

fn unsafe_is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false)
}

fn controldata(bin: &Path, data: &Path) -> std::collections::HashMap<String, String> {
    let out = Command::new(bin.join("pg_controldata")).arg(data).output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| {
            l.split_once(':').map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        })
        .collect()
}

fn lsn_text(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn as u32)
}

#[test]
fn real_clusters_decode_as_pg_controldata_reads_them() {
    let mut checked = 0;
    for (major, v) in [(15, PgMajorVersion::V15), (16, PgMajorVersion::V16)] {
        let Some(bin) = pg_bin(major) else {
            eprintln!(
                "SKIPPED: PostgreSQL {major} binaries are not installed (.ci/run installs them)"
            );
            continue;
        };
        let dir = initdb(&bin, true);
        let data = dir.path().join("data");
        let bytes = std::fs::read(data.join("global/pg_control")).unwrap();
        let c = ControlFileData::decode(&bytes, v).unwrap();
        let cd = controldata(&bin, &data);
        assert_eq!(cd["Database system identifier"], c.system_identifier.to_string());
        assert_eq!(cd["pg_control version number"], c.pg_control_version.to_string());
        assert_eq!(cd["Catalog version number"], c.catalog_version_no.to_string());
        assert_eq!(major_version_of_catalog(c.catalog_version_no), Some(v));
        assert_eq!(cd["Latest checkpoint location"], lsn_text(c.checkpoint));
        assert_eq!(cd["Latest checkpoint's REDO location"], lsn_text(c.checkpoint_copy.redo));
        assert_eq!(
            cd["Latest checkpoint's TimeLineID"],
            c.checkpoint_copy.this_timeline_id.to_string()
        );
        let next_xid = c.checkpoint_copy.next_xid;
        assert_eq!(
            cd["Latest checkpoint's NextXID"],
            format!("{}:{}", next_xid >> 32, next_xid as u32)
        );
        assert_eq!(cd["Latest checkpoint's NextOID"], c.checkpoint_copy.next_oid.to_string());
        assert_eq!(cd["Latest checkpoint's oldestXID"], c.checkpoint_copy.oldest_xid.to_string());
        assert_eq!(cd["max_connections setting"], c.max_connections.to_string());
        assert_eq!(cd["Database block size"], c.blcksz.to_string());
        assert_eq!(cd["Bytes per WAL segment"], c.xlog_seg_size.to_string());
        assert_eq!(cd["Maximum length of identifiers"], c.name_data_len.to_string());
        assert_eq!(cd["Data page checksum version"], c.data_checksum_version.to_string());
        assert_eq!(cd["Database cluster state"], "shut down");
        assert_eq!(c.state, DB_SHUTDOWNED);
        // Every byte is accounted for: re-encoding gives the file back.
        assert!(
            c.encode(v) == bytes,
            "PostgreSQL {major}: encode(decode(pg_control)) differs from the file"
        );
        // Data checksums of real pages: every initialized page of a catalog verifies.
        let pg_class = std::fs::read(data.join("base/1/1259")).unwrap();
        for (blk, page) in pg_class.chunks(crate::BLCKSZ).enumerate() {
            assert!(
                crate::page::verify_page_checksum(page, blk as u32),
                "PostgreSQL {major}: pg_class block {blk}"
            );
        }
        checked += 1;
    }
    eprintln!("checked {checked} real clusters");
}
