//! Backups of a small timeline built value by value: which files, with
//! which bytes, and the LSN rules.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use pageserver_api::reltag::{RelTag, SlruKind};
use postgres_ffi::controlfile::{CheckPoint, ControlFileData, DB_IN_PRODUCTION, DB_SHUTDOWNED};
use postgres_ffi::wal::rmgr::xlog::XLOG_CHECKPOINT_SHUTDOWN;
use postgres_ffi::wal::WalStreamDecoder;
use postgres_ffi::{PgMajorVersion, BLCKSZ};
use tokio_util::sync::CancellationToken;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use super::*;
use crate::tenant::mgr::TenantManager;
use crate::tenant::StorageConf;

const V: PgMajorVersion = PgMajorVersion::V16;
const START: Lsn = Lsn(0x0100_0000);
/// The LSN of the test data: mid-page, 8-byte aligned.
const L: Lsn = Lsn(0x0100_2A08);
const SYSID: u64 = 7_300_000_000_000_000_001;
const A: RelTag = RelTag { spcnode: 1663, dbnode: 5, relnode: 16384, forknum: 0 };
const U: RelTag = RelTag { spcnode: 1663, dbnode: 5, relnode: 16400, forknum: 0 };
const G: RelTag = RelTag { spcnode: 1664, dbnode: 0, relnode: 1262, forknum: 0 };

struct Env {
    _dir: tempfile::TempDir,
    _mgr: Arc<TenantManager>,
    tl: Arc<Timeline>,
}

fn page(tag: u8, blk: u32) -> Bytes {
    let mut p = vec![tag; BLCKSZ];
    p[..4].copy_from_slice(&blk.to_le_bytes());
    Bytes::from(p)
}

fn control_file() -> Bytes {
    let c = ControlFileData {
        system_identifier: SYSID,
        pg_control_version: postgres_ffi::controlfile::pg_control_version(V),
        catalog_version_no: 202307071,
        state: DB_IN_PRODUCTION,
        checkpoint: 0x0100_0028,
        blcksz: BLCKSZ as u32,
        relseg_size: 131072,
        xlog_blcksz: 8192,
        xlog_seg_size: 16 << 20,
        ..Default::default()
    };
    Bytes::from(c.encode(V))
}

fn checkpoint() -> Bytes {
    let cp = CheckPoint {
        redo: 0x0100_0028,
        this_timeline_id: 1,
        prev_timeline_id: 1,
        next_xid: (1 << 32) | 800,
        next_oid: 24576,
        ..Default::default()
    };
    let mut b = vec![0u8; postgres_ffi::controlfile::CHECKPOINT_SIZE];
    cp.encode_into(&mut b, V);
    Bytes::from(b)
}

/// At `L`: global and db 5 relmaps; A (3 pages + 1 FSM page), global G
/// (1 page), unlogged U (a stale main page, 1 init page); one CLOG and one
/// multixact-offsets page; a prepared transaction 742; control data.
async fn env(wait_lsn_timeout: Duration) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let mut conf = StorageConf::for_tests(dir.path());
    conf.wait_lsn_timeout = wait_lsn_timeout;
    let mgr = TenantManager::load(Arc::new(conf), CancellationToken::new()).await.unwrap();
    let tenant = mgr.create_tenant(TenantId::generate()).await.unwrap();
    let tl = tenant.create_empty_timeline(TimelineId::generate(), START, 16).await.unwrap();
    let mut m = tl.begin_modification(L);
    m.init_empty().await.unwrap();
    m.put_relmap_file(1664, 0, Bytes::from(vec![1u8; 524])).await.unwrap();
    m.put_relmap_file(1663, 5, Bytes::from(vec![5u8; 524])).await.unwrap();
    for (rel, pages, tag) in
        [(A, 3, 1u8), (A.with_fork(1), 1, 2), (G, 1, 3), (U, 1, 4), (U.with_fork(3), 1, 5)]
    {
        m.put_rel_creation(rel, 0).await.unwrap();
        for blk in 0..pages {
            m.put_rel_page_image(rel, blk, page(tag, blk)).await.unwrap();
        }
    }
    for (kind, tag) in [(SlruKind::Clog, 6u8), (SlruKind::MultiXactOffsets, 7)] {
        m.put_slru_segment_creation(kind, 0, 0).await.unwrap();
        m.put_slru_page_image(kind, 0, 0, page(tag, 0)).await.unwrap();
    }
    m.put_twophase_file(742, Bytes::from_static(b"two-phase state")).await.unwrap();
    m.put_control_file(control_file());
    m.put_checkpoint(checkpoint());
    m.commit().await.unwrap();
    Env { _dir: dir, _mgr: mgr, tl }
}

struct VecSink(Vec<u8>);

impl ChunkSink for VecSink {
    async fn send(&mut self, chunk: Bytes) -> Result<(), BackupError> {
        self.0.extend_from_slice(&chunk);
        Ok(())
    }
}

fn opts(full: bool, gzip: bool) -> BackupOptions {
    BackupOptions { lsn: L, full, replica: false, gzip, reader: ReadKind::HttpRequest }
}

async fn backup(tl: &Timeline, o: BackupOptions) -> Vec<u8> {
    let p = prepare(tl, o).await.unwrap();
    let (sink, _) = send_tarball(tl, p, VecSink(Vec::new())).await.unwrap();
    sink.0
}

/// Entries in archive order: path -> contents (`None` for a directory).
fn entries(tar: &[u8]) -> Vec<(String, Option<Vec<u8>>)> {
    let mut a = ::tar::Archive::new(tar);
    let mut out = Vec::new();
    for e in a.entries().unwrap() {
        let mut e = e.unwrap();
        let path = e.path().unwrap().to_string_lossy().trim_end_matches('/').to_string();
        if e.header().entry_type().is_dir() {
            out.push((path, None));
        } else {
            let mut v = Vec::new();
            std::io::Read::read_to_end(&mut e, &mut v).unwrap();
            out.push((path, Some(v)));
        }
    }
    out
}

fn files(tar: &[u8]) -> BTreeMap<String, Vec<u8>> {
    entries(tar).into_iter().filter_map(|(p, c)| c.map(|c| (p, c))).collect()
}

fn pages(tags: &[(u8, u32)]) -> Vec<u8> {
    tags.iter().flat_map(|&(t, b)| page(t, b).to_vec()).collect()
}

#[tokio::test]
async fn basebackup_has_the_compute_files_and_no_relation_data() {
    let e = env(Duration::from_secs(10)).await;
    let tar = backup(&e.tl, opts(false, false)).await;
    let all = entries(&tar);
    for d in ["global", "base", "base/5", "pg_wal", "pg_xact", "pg_replslot", "pg_twophase"] {
        assert!(all.contains(&(d.to_string(), None)), "directory {d} missing");
    }
    let f = files(&tar);
    assert_eq!(f["PG_VERSION"], b"16\n");
    assert_eq!(f["base/5/PG_VERSION"], b"16\n");
    assert_eq!(f["global/pg_filenode.map"], vec![1u8; 524]);
    assert_eq!(f["base/5/pg_filenode.map"], vec![5u8; 524]);
    assert_eq!(f["pg_ident.conf"], b"");
    assert_eq!(f["postgresql.auto.conf"], b"");
    assert!(String::from_utf8_lossy(&f["pg_hba.conf"]).contains("trust"));
    assert!(!f.contains_key("postgresql.conf") && !f.contains_key("backup_label"));
    assert_eq!(f["base/5/16400_init"], pages(&[(5, 0)]));
    assert_eq!(f["base/5/16400"], b"", "unlogged main fork: empty");
    for absent in ["base/5/16384", "base/5/16384_fsm", "global/1262"] {
        assert!(!f.contains_key(absent), "{absent}: no relation data in a basebackup");
    }
    assert_eq!(f["pg_xact/0000"], pages(&[(6, 0)]));
    assert_eq!(f["pg_multixact/offsets/0000"], pages(&[(7, 0)]));
    let mut twophase = b"two-phase state".to_vec();
    twophase.extend_from_slice(&crc32c::crc32c(b"two-phase state").to_le_bytes());
    assert_eq!(f["pg_twophase/000002E6"], twophase, "the state, then its CRC-32C");
    assert_eq!(f["neon.signal"], b"PREV LSN: none");
    assert_eq!(f["zenith.signal"], b"PREV LSN: none");
    let tail: Vec<&str> = all[all.len() - 4..].iter().map(|(p, _)| p.as_str()).collect();
    let wal = "pg_wal/000000010000000000000001";
    assert_eq!(tail, ["neon.signal", "zenith.signal", "global/pg_control", wal]);

    let c = ControlFileData::decode(&f["global/pg_control"], V).unwrap();
    assert_eq!((c.state, c.checkpoint, c.checkpoint_copy.redo), (DB_SHUTDOWNED, L.0, L.0));
    assert_eq!(c.checkpoint_copy.next_xid, (1 << 32) | 800);
    assert_eq!(c.system_identifier, SYSID);
    // Page headers only: the long header, then the header of L's page.
    let seg = &f[wal];
    assert_eq!(seg.len(), 16 << 20);
    assert_eq!(u16::from_le_bytes([seg[0], seg[1]]), 0xD113);
    assert_eq!(u64::from_le_bytes(seg[24..32].try_into().unwrap()), SYSID);
    assert!(seg[(L.0 & 0xFF_FFFF) as usize..].iter().all(|&b| b == 0), "no record at L");
}

#[tokio::test]
async fn fullbackup_has_every_page_and_a_checkpoint_record() {
    let e = env(Duration::from_secs(10)).await;
    e.tl.set_last_record(L, Lsn(0x0100_2900));
    let f = files(&backup(&e.tl, opts(true, false)).await);
    assert_eq!(f["base/5/16384"], pages(&[(1, 0), (1, 1), (1, 2)]));
    assert_eq!(f["base/5/16384_fsm"], pages(&[(2, 0)]));
    assert_eq!(f["global/1262"], pages(&[(3, 0)]));
    assert_eq!(f["base/5/16400_init"], pages(&[(5, 0)]));
    assert_eq!(f["base/5/16400"], pages(&[(5, 0)]), "unlogged main fork = init fork");
    assert!(!f.contains_key("neon.signal") && !f.contains_key("zenith.signal"));
    let seg = &f["pg_wal/000000010000000000000001"];
    let mut dec = WalStreamDecoder::new(L, V);
    dec.set_system_id(SYSID);
    dec.feed_bytes(&seg[(L.0 & 0xFF_FFFF) as usize..]);
    let rec = dec.poll_decode().unwrap().expect("a checkpoint record at L");
    assert_eq!((rec.lsn, rec.rmgr_info()), (L, XLOG_CHECKPOINT_SHUTDOWN));
    assert_eq!(rec.prev_lsn, Lsn(0x0100_2900), "xl_prev: the last record's start");
    let c = ControlFileData::decode(&f["global/pg_control"], V).unwrap();
    assert_eq!(CheckPoint::decode(&rec.main_data, V), c.checkpoint_copy);
}

#[tokio::test]
async fn gzip_and_prev_lsn() {
    let e = env(Duration::from_secs(10)).await;
    e.tl.set_last_record(L, Lsn(0x0100_2900));
    let gz = backup(&e.tl, opts(false, true)).await;
    let mut plain = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut plain).unwrap();
    assert!(gz.len() * 10 < plain.len(), "{} bytes compressed from {}", gz.len(), plain.len());
    let f = files(&plain);
    assert_eq!(f["zenith.signal"], b"PREV LSN: 0/1002900");
    assert_eq!(f["pg_xact/0000"], pages(&[(6, 0)]));
}

#[tokio::test]
async fn lsn_rules() {
    let e = env(Duration::from_millis(50)).await;
    let cancel = CancellationToken::new();
    let tl = &e.tl;
    assert_eq!(resolve_lsn(tl, None, &cancel).await.unwrap(), L);
    assert_eq!(resolve_lsn(tl, Some(START), &cancel).await.unwrap(), START);
    let err = resolve_lsn(tl, Some(Lsn(START.0 - 8)), &cancel).await.unwrap_err();
    assert!(matches!(err, BackupError::NotReadable(_)), "{err}");
    assert!(err.to_string().contains("0/FFFFF8") && err.to_string().contains("0/1000000"), "{err}");
    let err = resolve_lsn(tl, Some(Lsn(L.0 + 4)), &cancel).await.unwrap_err();
    assert!(err.to_string().contains("0/1002A0C is not a record boundary"), "{err}");
    let err = resolve_lsn(tl, Some(Lsn(L.0 + 8)), &cancel).await.unwrap_err();
    assert!(
        err.to_string().contains("0/1002A10 is beyond the timeline's last_record_lsn 0/1002A08"),
        "{err}"
    );
}
