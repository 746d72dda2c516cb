//! Base-backup import of tars built in the test with the `tar` crate:
//! relations (forks, 1 GiB segments, empty files), SLRUs, relmaps,
//! control data, the spill path, malformed and truncated tars, interrupted
//! imports and crash leftovers.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use pageserver::import::tar_reader::TarPart;
use pageserver::import::{import_archives_unfinished, import_basebackup, ImportError, Seed};
use pageserver::pgdatadir_mapping::{
    collect_keyspace, get_db_size_all_tablespaces, get_rel_pages_batched, get_rel_size,
    get_slru_segment, list_dbs, list_rels, BLCKSZ, RELSEG_SIZE,
};
use pageserver::tenant::mgr::TenantManager;
use pageserver::tenant::ReadKind;
use pageserver::tenant::{StorageConf, Tenant, TenantError, Timeline};
use pageserver_api::key::Key;
use pageserver_api::reltag::{RelTag, SlruKind};
use tokio_util::sync::CancellationToken;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

const START: Lsn = Lsn(0x3000028);

struct Env {
    dir: tempfile::TempDir,
    mgr: Arc<TenantManager>,
    tenant: Arc<Tenant>,
}

async fn env() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let mgr =
        TenantManager::load(Arc::new(StorageConf::for_tests(dir.path())), CancellationToken::new())
            .await
            .unwrap();
    let tenant = mgr.create_tenant(TenantId::generate()).await.unwrap();
    Env { dir, mgr, tenant }
}

impl Env {
    fn timelines_dir(&self) -> PathBuf {
        self.dir.path().join("tenants").join(self.tenant.id().to_string()).join("timelines")
    }

    /// Nothing but finished timelines in the tenant's directory.
    fn assert_no_leftovers(&self) {
        let names: Vec<String> = std::fs::read_dir(self.timelines_dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        let finished: Vec<String> =
            self.tenant.list_timelines().iter().map(|t| t.timeline_id.to_string()).collect();
        for n in &names {
            assert!(finished.contains(n), "leftover {n} in {}", self.timelines_dir().display());
        }
    }
}

/// A page whose bytes identify (file, block).
fn page(seed: u32, blk: u32) -> Vec<u8> {
    let mut p = vec![0u8; BLCKSZ];
    for (i, chunk) in p.chunks_mut(8).enumerate() {
        chunk[..4].copy_from_slice(&seed.to_le_bytes());
        chunk[4..].copy_from_slice(&(blk ^ i as u32).to_le_bytes());
    }
    p
}

fn pages(seed: u32, first: u32, n: u32) -> Vec<u8> {
    (first..first + n).flat_map(|b| page(seed, b)).collect()
}

/// pg_control in PostgreSQL 15's layout with a valid CRC.
/// A pg_control in the layout of the version `catversion` belongs to.
fn control(catversion: u32) -> Vec<u8> {
    use postgres_ffi::controlfile::{
        major_version_of_catalog, pg_control_version, CheckPoint, ControlFileData,
    };
    let v = major_version_of_catalog(catversion).unwrap_or(postgres_ffi::PgMajorVersion::V15);
    ControlFileData {
        system_identifier: 7_000_000,
        pg_control_version: pg_control_version(v),
        catalog_version_no: catversion,
        checkpoint: 0x30416A8,
        checkpoint_copy: CheckPoint { redo: START.0, this_timeline_id: 1, ..CheckPoint::default() },
        ..ControlFileData::default()
    }
    .encode(v)
}

enum E {
    File(&'static str, Vec<u8>),
    Dir(&'static str),
    Symlink(&'static str, &'static str),
}

fn build_tar(entries: &[E]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        let mut h = tar::Header::new_ustar();
        h.set_mode(0o600);
        match e {
            E::File(p, data) => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_size(data.len() as u64);
                b.append_data(&mut h, p, &data[..]).unwrap();
            }
            E::Dir(p) => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_size(0);
                b.append_data(&mut h, p, io::empty()).unwrap();
            }
            E::Symlink(p, target) => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_size(0);
                b.append_link(&mut h, p, target).unwrap();
            }
        }
    }
    b.into_inner().unwrap()
}

fn label() -> Vec<u8> {
    format!(
        "START WAL LOCATION: {START} (file 000000010000000000000003)\nCHECKPOINT LOCATION: 0/30416A8\n\
         BACKUP METHOD: streamed\nBACKUP FROM: primary\nSTART TIMELINE: 1\n"
    )
    .into_bytes()
}

/// A small but complete PG15 base backup; `version_last` puts PG_VERSION
/// after the data (as a server's readdir order may).
fn small_backup(version_last: bool) -> Vec<E> {
    let mut v = vec![E::File("backup_label", label()), E::File("tablespace_map", Vec::new())];
    if !version_last {
        v.push(E::File("PG_VERSION", b"15\n".to_vec()));
    }
    v.extend([
        E::File("postgresql.conf", b"shared_buffers = 1MB\n".to_vec()),
        E::Dir("global"),
        E::File("global/1262", pages(1262, 0, 1)),
        E::File("global/pg_filenode.map", vec![0x17; 512]),
        E::File("global/6100", Vec::new()),
        E::Dir("base"),
        E::Dir("base/5"),
        E::File("base/5/PG_VERSION", b"15\n".to_vec()),
        E::File("base/5/pg_filenode.map", vec![0x05; 512]),
        E::File("base/5/16384", pages(16384, 0, 5)),
        E::File("base/5/16384_fsm", pages(163841, 0, 3)),
        E::File("base/5/16384_vm", pages(163842, 0, 1)),
        E::File("base/5/16390_init", pages(16390, 0, 1)),
        E::File("base/5/t3_16400", pages(1, 0, 1)),
        E::Dir("base/1"),
        E::File("base/1/1259", pages(1259, 0, 2)),
        E::Dir("pg_tblspc"),
        E::Dir("pg_xact"),
        E::File("pg_xact/0000", pages(7, 0, 3)),
        E::File("pg_multixact/offsets/0000", pages(8, 0, 1)),
        E::File("pg_multixact/members/0000", pages(9, 0, 1)),
        E::File("pg_twophase/000002E6", twophase_file(b"two-phase state")),
    ]);
    if version_last {
        v.push(E::File("PG_VERSION", b"15\n".to_vec()));
    }
    v.push(E::File("global/pg_control", control(202209061)));
    v
}

fn stream_of(
    data: Vec<u8>,
    chunk: usize,
) -> impl Stream<Item = Result<Bytes, io::Error>> + Send + Unpin {
    let chunks: Vec<Result<Bytes, io::Error>> =
        data.chunks(chunk).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
    futures::stream::iter(chunks)
}

/// Relation files of `entries` as rel -> concatenated pages.
fn expected_rels(entries: &[E]) -> BTreeMap<RelTag, Vec<u8>> {
    let mut out = BTreeMap::new();
    for e in entries {
        let E::File(p, data) = e else { continue };
        let parts: Vec<&str> = p.split('/').collect();
        let (spc, db, name) = match parts.as_slice() {
            ["global", n] => (1664, 0, *n),
            ["base", db, n] => (1663, db.parse().unwrap(), *n),
            _ => continue,
        };
        let (base, fork) = match name.split_once('_') {
            Some((b, "fsm")) => (b, 1),
            Some((b, "vm")) => (b, 2),
            Some((b, "init")) => (b, 3),
            _ => (name, 0),
        };
        let Ok(relnode) = base.parse::<u32>() else { continue };
        out.insert(RelTag::new(spc, db, relnode, fork), data.clone());
    }
    out
}

#[tokio::test]
async fn imports_a_small_backup() {
    for version_last in [false, true] {
        let env = env().await;
        let entries = small_backup(version_last);
        let tar = build_tar(&entries);
        let id = TimelineId::generate();
        let tl = import_basebackup(env.tenant.clone(), id, stream_of(tar, 1000)).await.unwrap();
        assert_eq!(tl.get_last_record_lsn(), START);
        assert_eq!(tl.get_disk_consistent_lsn(), START, "durable when import returns");
        assert_eq!(tl.get_initial_lsn(), Lsn(START.0 - 1));
        assert_eq!(tl.pg_version, 15);
        assert!(env.tenant.get_timeline(id).is_ok());
        // The spill file (used when PG_VERSION comes last) was unlinked at once.
        let scratch = std::fs::read_dir(env.tenant.scratch_dir()).unwrap().count();
        assert_eq!(scratch, 0, "scratch dir empty after the import");

        let dbs = list_dbs(&tl, ReadKind::HttpRequest, START).await.unwrap();
        assert_eq!(dbs, vec![((1663, 1), false), ((1663, 5), true), ((1664, 0), true)]);
        let rels = expected_rels(&entries);
        assert_eq!(rels.len(), 7);
        let mut listed = list_rels(&tl, ReadKind::HttpRequest, 1663, 5, START).await.unwrap();
        listed.extend(list_rels(&tl, ReadKind::HttpRequest, 1663, 1, START).await.unwrap());
        listed.extend(list_rels(&tl, ReadKind::HttpRequest, 1664, 0, START).await.unwrap());
        listed.sort();
        assert_eq!(
            listed,
            rels.keys().copied().collect::<Vec<_>>(),
            "temp relation t3_16400 skipped"
        );
        for (rel, data) in &rels {
            let n = (data.len() / BLCKSZ) as u32;
            assert_eq!(
                get_rel_size(&tl, ReadKind::HttpRequest, *rel, START).await.unwrap(),
                n,
                "{rel}"
            );
            let reqs: Vec<_> = (0..n).map(|b| (*rel, b, START)).collect();
            for (b, r) in get_rel_pages_batched(&tl, ReadKind::HttpRequest, &reqs)
                .await
                .unwrap()
                .iter()
                .enumerate()
            {
                assert_eq!(
                    &r.as_ref().unwrap()[..],
                    &data[b * BLCKSZ..(b + 1) * BLCKSZ],
                    "{rel} block {b}"
                );
            }
        }
        let clog =
            get_slru_segment(&tl, ReadKind::HttpRequest, SlruKind::Clog, 0, START).await.unwrap();
        assert_eq!(&clog[..], &pages(7, 0, 3)[..], "short last SLRU segment");
        assert_eq!(
            &get_slru_segment(&tl, ReadKind::HttpRequest, SlruKind::MultiXactMembers, 0, START)
                .await
                .unwrap()[..],
            &pages(9, 0, 1)[..]
        );
        assert_eq!(&tl.get(Key::relmap_file(1663, 5), START).await.unwrap()[..], &[5u8; 512][..]);
        assert_eq!(&tl.get(Key::control_file(), START).await.unwrap()[..], &control(202209061)[..]);
        let cp = tl.get(Key::checkpoint(), START).await.unwrap();
        assert_eq!((cp.len(), &cp[..8]), (88, &START.0.to_le_bytes()[..]));
        // Stored as the PREPARE record holds it: without the file's CRC.
        assert_eq!(
            &tl.get(Key::twophase_file(0x2E6), START).await.unwrap()[..],
            b"two-phase state"
        );

        // The keyspace lists every imported page, and nothing unreadable.
        let ks = collect_keyspace(&tl, ReadKind::HttpRequest, START).await.unwrap();
        let total_pages: u64 = rels.values().map(|d| (d.len() / BLCKSZ) as u64).sum();
        let rel_blocks: u64 = ks
            .iter()
            .map(|r| {
                let mut n = 0;
                let mut k = r.start;
                while k < r.end {
                    n += k.is_rel_block() as u64;
                    k = k.next();
                }
                n
            })
            .sum();
        assert_eq!(rel_blocks, total_pages);
        env.assert_no_leftovers();
    }
}

/// Streams a tar whose data is generated on the fly (no 1 GiB buffer).
fn generated_tar(
    files: Vec<(String, u32, u32)>,
) -> impl Stream<Item = Result<Bytes, io::Error>> + Send + Unpin {
    // (path, seed, nblocks) -> header, pages, padding; then the end marker.
    let head =
        build_tar(&[E::File("backup_label", label()), E::File("PG_VERSION", b"15\n".to_vec())]);
    let head = Bytes::from(head[..head.len() - 1024].to_vec()); // without its end marker
    let tail = {
        let t = build_tar(&[E::File("global/pg_control", control(202209061))]);
        Bytes::from(t)
    };
    let parts = futures::stream::iter(files).flat_map(|(path, seed, n)| {
        let mut h = tar::Header::new_gnu();
        h.set_path(&path).unwrap();
        h.set_size(n as u64 * BLCKSZ as u64);
        h.set_mode(0o600);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_cksum();
        let header = Bytes::copy_from_slice(h.as_bytes());
        futures::stream::iter(
            std::iter::once(header).chain((0..n).map(move |b| Bytes::from(page(seed, b)))),
        )
    });
    futures::stream::iter([head]).chain(parts).chain(futures::stream::iter([tail])).map(Ok).boxed()
}

#[tokio::test]
async fn relation_across_segments() {
    let env = env().await;
    let rel = RelTag::new(1663, 5, 16384, 0);
    // Segment 1 arrives before segment 0 (the server's readdir order).
    let files =
        vec![("base/5/16384.1".to_string(), 1, 3), ("base/5/16384".to_string(), 0, RELSEG_SIZE)];
    let tl = import_basebackup(env.tenant.clone(), TimelineId::generate(), generated_tar(files))
        .await
        .unwrap();
    assert_eq!(
        get_rel_size(&tl, ReadKind::HttpRequest, rel, START).await.unwrap(),
        RELSEG_SIZE + 3
    );
    let probes = [0, 1, RELSEG_SIZE - 1, RELSEG_SIZE, RELSEG_SIZE + 2, RELSEG_SIZE + 3];
    let reqs: Vec<_> = probes.iter().map(|&b| (rel, b, START)).collect();
    let out = get_rel_pages_batched(&tl, ReadKind::HttpRequest, &reqs).await.unwrap();
    for (&b, r) in probes.iter().zip(&out) {
        let want = if b < RELSEG_SIZE {
            page(0, b)
        } else if b < RELSEG_SIZE + 3 {
            page(1, b - RELSEG_SIZE)
        } else {
            vec![0; BLCKSZ]
        };
        assert_eq!(&r.as_ref().unwrap()[..], &want[..], "block {b}");
    }
}

async fn expect_bad(env: &Env, tar: Vec<u8>, needle: &str) {
    let id = TimelineId::generate();
    match import_basebackup(env.tenant.clone(), id, stream_of(tar, 4096)).await {
        Err(ImportError::BadTar(msg)) => {
            assert!(msg.contains(needle), "expected '{needle}' in: {msg}")
        }
        Err(e) => panic!("expected BadTar with '{needle}', got {e:?}"),
        Ok(_) => panic!("expected BadTar with '{needle}', import succeeded"),
    }
    assert!(matches!(env.tenant.get_timeline(id), Err(TenantError::NotFound(_))));
    env.assert_no_leftovers();
    // The same id can be imported afterwards.
    import_basebackup(env.tenant.clone(), id, stream_of(build_tar(&small_backup(false)), 4096))
        .await
        .unwrap();
}

#[tokio::test]
async fn bad_tars_are_rejected_and_leave_nothing() {
    let env = env().await;
    let good = build_tar(&small_backup(false));
    let with = |f: &dyn Fn(&mut Vec<E>)| {
        let mut e = small_backup(false);
        f(&mut e);
        build_tar(&e)
    };

    expect_bad(&env, vec![b'x'; 5000], "not a tar archive").await;
    expect_bad(&env, Vec::new(), "truncated").await;
    expect_bad(&env, good[..good.len() / 2].to_vec(), "truncated").await;
    // Cut exactly after pg_control's data: no end-of-archive marker.
    expect_bad(&env, good[..good.len() - 1024].to_vec(), "end-of-archive").await;
    let mut corrupt = good.clone();
    corrupt[512 * 3 + 100] ^= 0x55; // inside the header of the second entry
    expect_bad(&env, corrupt, "checksum").await;
    expect_bad(
        &env,
        with(&|e| {
            e.pop();
        }),
        "no global/pg_control",
    )
    .await;
    // A tablespace's files are in another tar of pg_basebackup -Ft.
    expect_bad(
        &env,
        with(&|e| e.insert(5, E::Symlink("pg_tblspc/16500", "/somewhere/else"))),
        "'pg_tblspc/16500' is a symlink to '/somewhere/else'",
    )
    .await;
    expect_bad(
        &env,
        with(&|e| e.insert(5, E::File("base/5/16999", vec![1; 1000]))),
        "'base/5/16999' is 1000 bytes, not a multiple",
    )
    .await;
    expect_bad(
        &env,
        with(&|e| e[2] = E::File("PG_VERSION", b"14\n".to_vec())),
        "PostgreSQL 14 is not supported",
    )
    .await;
    expect_bad(
        &env,
        with(&|e| e.insert(9, E::File("base/5/16384", pages(1, 0, 1)))),
        "appears twice",
    )
    .await;
    expect_bad(
        &env,
        with(&|e| *e.last_mut().unwrap() = E::File("global/pg_control", control(202307071))),
        "written by PostgreSQL 16",
    )
    .await;
    let mut bad_control = control(202209061);
    bad_control[40] ^= 1;
    expect_bad(
        &env,
        with(&|e| *e.last_mut().unwrap() = E::File("global/pg_control", bad_control.clone())),
        "checksum",
    )
    .await;
    expect_bad(
        &env,
        with(&|e| {
            e.remove(0);
            e.remove(1);
        }),
        "no PG_VERSION",
    )
    .await;
    expect_bad(
        &env,
        with(&|e| e[0] = E::File("backup_label", b"LABEL: x\n".to_vec())),
        "backup_label",
    )
    .await;
}

#[tokio::test]
async fn existing_timeline_is_a_conflict() {
    let env = env().await;
    let id = TimelineId::generate();
    let tar = build_tar(&small_backup(false));
    import_basebackup(env.tenant.clone(), id, stream_of(tar.clone(), 4096)).await.unwrap();
    let Err(err) = import_basebackup(env.tenant.clone(), id, stream_of(tar, 4096)).await else {
        panic!("second import succeeded")
    };
    assert!(matches!(err, ImportError::AlreadyExists(_)), "{err:?}");
}

#[tokio::test]
async fn interrupted_stream_leaves_nothing_and_can_be_retried() {
    let env = env().await;
    let id = TimelineId::generate();
    let tar = build_tar(&small_backup(false));
    let half: Vec<Result<Bytes, io::Error>> = vec![
        Ok(Bytes::copy_from_slice(&tar[..tar.len() / 2])),
        Err(io::Error::new(io::ErrorKind::ConnectionReset, "client went away")),
    ];
    let Err(err) = import_basebackup(env.tenant.clone(), id, futures::stream::iter(half)).await
    else {
        panic!("import of a broken stream succeeded")
    };
    assert!(matches!(err, ImportError::BodyRead { timed_out: false, .. }), "{err:?}");
    assert!(err.to_string().contains("client went away"), "{err}");
    env.assert_no_leftovers();
    import_basebackup(env.tenant.clone(), id, stream_of(tar, 4096)).await.unwrap();
}

/// A crash (kill -9) in the middle of an import: the timeline's temp
/// directory stays on disk; the next start removes it and the import can be
/// retried.
#[tokio::test]
async fn crash_during_import_leaves_nothing_after_restart() {
    let env = env().await;
    let id = TimelineId::generate();
    let tar = build_tar(&small_backup(false));
    let first_half = Bytes::copy_from_slice(&tar[..tar.len() / 2]);
    let stalled = futures::stream::iter([Ok(first_half)]).chain(futures::stream::pending());
    let mut import = Box::pin(import_basebackup(env.tenant.clone(), id, stalled));
    assert!(tokio::time::timeout(std::time::Duration::from_millis(500), &mut import)
        .await
        .is_err());
    let temp_dirs = || -> Vec<PathBuf> {
        std::fs::read_dir(env.timelines_dir()).unwrap().map(|e| e.unwrap().path()).collect()
    };
    assert_eq!(temp_dirs().len(), 1, "import in progress has its temp directory");
    // "Crash": no destructor runs.
    std::mem::forget(import);
    env.mgr.shutdown().await;

    let mgr = TenantManager::load(
        Arc::new(StorageConf::for_tests(env.dir.path())),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let tenant = mgr.get_tenant(env.tenant.id()).unwrap();
    assert!(tenant.get_timeline(id).is_err());
    assert!(temp_dirs().is_empty(), "restart removed the half-made timeline: {:?}", temp_dirs());
    let tl = import_basebackup(tenant.clone(), id, stream_of(tar, 4096)).await.unwrap();
    assert_eq!(tl.get_last_record_lsn(), START);
    assert!(dir_exists(&env.timelines_dir().join(id.to_string())));
}

/// Tablespace 16450's archive: a relation of database 5, and database
/// 16600 entirely.
fn tablespace_tar() -> Vec<u8> {
    build_tar(&[
        E::Dir("PG_15_202209061"),
        E::Dir("PG_15_202209061/5"),
        E::File("PG_15_202209061/5/16500", pages(16500, 0, 4)),
        E::Dir("PG_15_202209061/16600"),
        E::File("PG_15_202209061/16600/PG_VERSION", b"15\n".to_vec()),
        E::File("PG_15_202209061/16600/pg_filenode.map", vec![0x06; 512]),
        E::File("PG_15_202209061/16600/1259", pages(1259, 0, 2)),
    ])
}

/// A `BASE_BACKUP` with tablespace 16450: its archive first, then base.tar
/// with the `pg_tblspc/16450` symlink, in one stream of parts (chunks of
/// 1000 bytes: entries straddle them).
fn base_backup_parts() -> impl Stream<Item = Result<TarPart, io::Error>> + Send + Unpin {
    let mut main = small_backup(true);
    main.insert(5, E::Symlink("pg_tblspc/16450", "/srv/ts"));
    let mut parts = vec![TarPart::Archive { prefix: "pg_tblspc/16450/".into() }];
    for (prefix, tar) in [("pg_tblspc/16450/", tablespace_tar()), ("", build_tar(&main))] {
        if prefix.is_empty() {
            parts.push(TarPart::Archive { prefix: String::new() });
        }
        parts.extend(tar.chunks(1000).map(|c| TarPart::Data(Bytes::copy_from_slice(c))));
    }
    futures::stream::iter(parts.into_iter().map(Ok::<_, io::Error>))
}

/// The relations got spcOid 16450, the tablespace is recorded (database
/// 0), DbSize sums every tablespace.
async fn check_tablespace_16450(tl: &Timeline) {
    let dbs = list_dbs(tl, ReadKind::HttpRequest, START).await.unwrap();
    let spcs: Vec<(u32, u32)> = dbs.iter().map(|(k, _)| *k).filter(|k| k.0 == 16450).collect();
    assert_eq!(spcs, [(16450, 0), (16450, 5), (16450, 16600)]);
    let rel = RelTag::new(16450, 5, 16500, 0);
    assert_eq!(get_rel_size(tl, ReadKind::HttpRequest, rel, START).await.unwrap(), 4);
    let out = get_rel_pages_batched(tl, ReadKind::HttpRequest, &[(rel, 3, START)]).await.unwrap();
    assert_eq!(&out[0].as_ref().unwrap()[..], &page(16500, 3)[..]);
    let size = |db| get_db_size_all_tablespaces(tl, ReadKind::HttpRequest, db, START);
    // base/5: 16384 (5 + 3 fsm + 1 vm), 16390_init (1); ts: 16500 (4).
    assert_eq!(size(5).await.unwrap(), 14 * BLCKSZ as u64);
    assert_eq!(size(16600).await.unwrap(), 2 * BLCKSZ as u64);
    assert!(size(0).await.is_err() && size(7).await.is_err());
}

/// Unseeded (the tablespace's entries are spilled until backup_label and
/// PG_VERSION), and seeded as the bootstrap does (imported as they come).
#[tokio::test]
async fn imports_the_archives_of_a_base_backup_with_a_tablespace() {
    let env = env().await;
    let seed = Seed { start_lsn: START, pg_version: 15 };
    for seed in [None, Some(seed)] {
        let id = TimelineId::generate();
        let parts = base_backup_parts();
        let uninit = import_archives_unfinished(env.tenant.clone(), id, parts, None, seed);
        let tl = uninit.await.unwrap().finish().await.unwrap();
        check_tablespace_16450(&tl).await;
    }
}

/// A seed that backup_label or PG_VERSION contradict fails, naming both.
/// (For the version, base.tar alone: a tablespace's relmap read as the
/// seed's major would fail first, for its size.)
#[tokio::test]
async fn a_seed_must_agree_with_the_backup() {
    let env = env().await;
    let base_only = || {
        let tar = build_tar(&small_backup(false));
        let parts: Vec<Result<TarPart, io::Error>> =
            tar.chunks(1000).map(|c| Ok(TarPart::Data(Bytes::copy_from_slice(c)))).collect();
        futures::stream::iter(parts)
    };
    let lsn_seed = Seed { start_lsn: Lsn(0x4000028), pg_version: 15 };
    let lsn_msg =
        "backup_label says START WAL LOCATION 0/3000028, but the base backup began at 0/4000028";
    let id = TimelineId::generate();
    let res = import_archives_unfinished(
        env.tenant.clone(),
        id,
        base_backup_parts(),
        None,
        Some(lsn_seed),
    )
    .await;
    expect_seed_error(res, lsn_msg);
    let version_seed = Seed { start_lsn: START, pg_version: 16 };
    let version_msg = "PG_VERSION says 15, but the server runs PostgreSQL 16";
    let res =
        import_archives_unfinished(env.tenant.clone(), id, base_only(), None, Some(version_seed))
            .await;
    expect_seed_error(res, version_msg);
    env.assert_no_leftovers();
}

fn expect_seed_error<T>(res: Result<T, ImportError>, needle: &str) {
    match res {
        Err(ImportError::BadTar(m)) => assert!(m.contains(needle), "{m}"),
        Err(e) => panic!("{e:?}"),
        Ok(_) => panic!("imported despite the seed: expected {needle}"),
    }
}

/// The output directory of `pg_basebackup -Ft` as one tar: base.tar (with
/// `tablespace_map` naming 16450), 16450.tar, backup_manifest, pg_wal.tar.
fn ft_directory(map: &str, with_tablespace: bool) -> Vec<u8> {
    let mut main = small_backup(true);
    main[1] = E::File("tablespace_map", map.as_bytes().to_vec());
    let mut outer = vec![E::Dir(".")];
    if with_tablespace {
        outer.push(E::File("16450.tar", tablespace_tar()));
    }
    outer.extend([
        E::File("backup_manifest", b"{}\n".to_vec()),
        E::File("base.tar", build_tar(&main)),
        E::File("pg_wal.tar", build_tar(&[E::File("000000010000000000000003", vec![0; 1000])])),
    ]);
    build_tar(&outer)
}

#[tokio::test]
async fn imports_a_pg_basebackup_ft_directory() {
    let env = env().await;
    let body = ft_directory("16450 /srv/ts\n", true);
    let tl = import_basebackup(env.tenant.clone(), TimelineId::generate(), stream_of(body, 3000))
        .await
        .unwrap();
    check_tablespace_16450(&tl).await;
    // A tablespace_map line without its archive, or base.tar alone.
    let needle = "tablespace_map names tablespace 16451 at '/srv/ts2': that tablespace's files (16451.tar) are missing";
    expect_bad(&env, ft_directory("16450 /srv/ts\n16451 /srv/ts2\n", true), needle).await;
    let mut alone = small_backup(false);
    alone[1] = E::File("tablespace_map", b"16450 /srv/ts\n".to_vec());
    expect_bad(&env, build_tar(&alone), "send the whole pg_basebackup -Ft directory as one tar")
        .await;
}

fn dir_exists(p: &Path) -> bool {
    p.is_dir()
}

/// A two-phase state file as PostgreSQL writes it: the state, then its CRC-32C.
fn twophase_file(state: &[u8]) -> Vec<u8> {
    let mut f = state.to_vec();
    f.extend_from_slice(&crc32c::crc32c(state).to_le_bytes());
    f
}
