//! Import of a real PostgreSQL base backup: a fresh cluster, `pgbench -i`,
//! `pg_basebackup -Ft -X none`, import of `base.tar` in-process, then every
//! relation page served by `get_rel_pages_batched` is compared byte for byte
//! with the file in the tar (and sizes, SLRU segments, relmap files, the
//! keyspace).
//!
//! PostgreSQL 15 comes from /usr/lib/postgresql/15/bin (Debian's package).
//! PostgreSQL 16 is tested when `PG16_BIN_DIR` points at its bin directory
//! (e.g. the `pgserver` PyPI wheel's `pginstall/bin`). A missing version is
//! skipped with a printed reason. As root, the server runs as `postgres`.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use bytes::Bytes;
use futures::Stream;
use pageserver::import::import_basebackup;
use pageserver::import::pg_files::{classify, PgFile};
use pageserver::pgdatadir_mapping::{
    collect_keyspace, get_rel_pages_batched, get_rel_size, get_slru_segment, BLCKSZ, RELSEG_SIZE,
};
use pageserver::tenant::mgr::TenantManager;
use pageserver::tenant::ReadKind;
use pageserver::tenant::StorageConf;
use pageserver_api::key::Key;
use pageserver_api::reltag::RelTag;
use tokio_util::sync::CancellationToken;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

/// Run a PostgreSQL program, as `postgres` when we are root.
fn pg_cmd(bin: &Path, prog: &str) -> Command {
    let exe = bin.join(prog);
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(exe);
        c
    } else {
        Command::new(exe)
    }
}

fn run(mut c: Command) -> String {
    let out = c.output().unwrap_or_else(|e| panic!("spawn {c:?}: {e}"));
    assert!(
        out.status.success(),
        "{c:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A throwaway cluster with its own socket directory; stopped on drop.
struct Cluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
}

impl Cluster {
    fn start(bin: &Path, port_offset: u16) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        // The server user must be able to use the directory.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let port = 20000 + (std::process::id() % 20000) as u16 + port_offset;
        let c = Cluster { dir, bin: bin.to_path_buf(), port };
        let mut initdb = pg_cmd(bin, "initdb");
        initdb.args(["-A", "trust", "-U", "postgres", "--no-sync", "-D"]).arg(c.data());
        run(initdb);
        let mut start = pg_cmd(bin, "pg_ctl");
        start
            .arg("-D")
            .arg(c.data())
            .arg("-o")
            .arg(format!(
                "-p {} -k {} -c listen_addresses='' -c fsync=off",
                c.port,
                c.dir.path().display()
            ))
            .arg("-l")
            .arg(c.dir.path().join("log"))
            .args(["-w", "start"]);
        run(start);
        c
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn client(&self, prog: &str) -> Command {
        let mut c = pg_cmd(&self.bin, prog);
        c.arg("-h")
            .arg(self.dir.path())
            .arg("-p")
            .arg(self.port.to_string())
            .args(["-U", "postgres"]);
        c
    }

    /// `pg_basebackup -Ft -X none`; returns the path of base.tar.
    fn basebackup(&self) -> PathBuf {
        let out = self.dir.path().join("backup");
        let mut c = self.client("pg_basebackup");
        c.args(["-Ft", "-X", "none", "-c", "fast", "-D"]).arg(&out);
        run(c);
        out.join("base.tar")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let mut stop = pg_cmd(&self.bin, "pg_ctl");
        stop.arg("-D").arg(self.data()).args(["-m", "immediate", "-w", "stop"]);
        let _ = stop.output();
    }
}

fn file_stream(path: &Path) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send + Unpin {
    let file = std::fs::File::open(path).unwrap();
    Box::pin(futures::stream::unfold(file, |mut f| async move {
        let mut buf = vec![0u8; 64 * 1024];
        match f.read(&mut buf) {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(Bytes::from(buf)), f))
            }
            Err(e) => Some((Err(e), f)),
        }
    }))
}

fn backup_lsn(tar_path: &Path) -> Lsn {
    let mut ar = tar::Archive::new(std::fs::File::open(tar_path).unwrap());
    for e in ar.entries().unwrap() {
        let mut e = e.unwrap();
        if e.path().unwrap().to_str() == Some("backup_label") {
            let mut s = String::new();
            e.read_to_string(&mut s).unwrap();
            let line = s.lines().find(|l| l.starts_with("START WAL LOCATION:")).unwrap();
            return line.split_whitespace().nth(3).unwrap().parse().unwrap();
        }
    }
    panic!("no backup_label in {}", tar_path.display());
}

async fn import_and_compare(bin: &Path, expect_version: u32) {
    let cluster = Cluster::start(bin, expect_version as u16);
    let mut bench = cluster.client("pgbench");
    bench.args(["-i", "-s", "1", "-q", "postgres"]);
    run(bench);
    let mut psql = cluster.client("psql");
    psql.args(["-q", "-c"])
        .arg(
            "CREATE TABLE big_text AS SELECT g, (SELECT string_agg(md5(g::text || i::text), '') \
             FROM generate_series(1, 100) i) AS t FROM generate_series(1, 2000) g",
        )
        .args(["-c", "CREATE UNLOGGED TABLE scratch (a int)", "-c", "VACUUM", "postgres"]);
    run(psql);
    let tar_path = cluster.basebackup();

    let workdir = tempfile::tempdir().unwrap();
    let mgr = TenantManager::load(
        Arc::new(StorageConf::for_tests(workdir.path())),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let tenant = mgr.create_tenant(TenantId::generate()).await.unwrap();
    let tl =
        import_basebackup(tenant, TimelineId::generate(), file_stream(&tar_path)).await.unwrap();
    let lsn = backup_lsn(&tar_path);
    assert_eq!(tl.get_last_record_lsn(), lsn);
    assert_eq!(tl.pg_version, expect_version);

    // Walk the tar again and compare every page.
    let mut sizes: BTreeMap<RelTag, u32> = BTreeMap::new();
    let (mut pages, mut slru_segments, mut relmaps) = (0u64, 0u32, 0u32);
    let mut ar = tar::Archive::new(std::fs::File::open(&tar_path).unwrap());
    for e in ar.entries().unwrap() {
        let mut e = e.unwrap();
        if e.header().entry_type() != tar::EntryType::Regular {
            continue;
        }
        let path = e.path().unwrap().to_string_lossy().into_owned();
        let mut data = Vec::new();
        e.read_to_end(&mut data).unwrap();
        match classify(&path, false) {
            PgFile::Rel { rel, segno } => {
                let n = (data.len() / BLCKSZ) as u32;
                let first = segno * RELSEG_SIZE;
                let s = sizes.entry(rel).or_default();
                *s = (*s).max(first + n);
                let blocks: Vec<u32> = (first..first + n).collect();
                for chunk in blocks.chunks(32) {
                    let reqs: Vec<_> = chunk.iter().map(|&b| (rel, b, lsn)).collect();
                    let out =
                        get_rel_pages_batched(&tl, ReadKind::HttpRequest, &reqs).await.unwrap();
                    for (&b, r) in chunk.iter().zip(out) {
                        let off = (b - first) as usize * BLCKSZ;
                        let got = r.unwrap_or_else(|e| panic!("{path} block {b}: {e}"));
                        assert!(
                            got[..] == data[off..off + BLCKSZ],
                            "{path}: block {b} differs from the backup"
                        );
                        pages += 1;
                    }
                }
            }
            PgFile::Slru { kind, segno } => {
                let got =
                    get_slru_segment(&tl, ReadKind::HttpRequest, kind, segno, lsn).await.unwrap();
                assert!(got[..] == data[..], "{path} differs");
                slru_segments += 1;
            }
            PgFile::Relmap { spc, db } => {
                let got = tl.get(Key::relmap_file(spc, db), lsn).await.unwrap();
                assert!(got[..] == data[..], "{path} differs");
                relmaps += 1;
            }
            PgFile::Control => {
                assert!(tl.get(Key::control_file(), lsn).await.unwrap()[..] == data[..]);
            }
            _ => {}
        }
    }
    for (rel, n) in &sizes {
        assert_eq!(
            get_rel_size(&tl, ReadKind::HttpRequest, *rel, lsn).await.unwrap(),
            *n,
            "size of {rel}"
        );
    }
    // pgbench_accounts alone is ~1,640 pages at scale 1; big_text's TOAST ~800.
    assert!(pages > 2500, "only {pages} pages compared");
    assert!(slru_segments >= 1 && relmaps >= 2, "{slru_segments} SLRU segments, {relmaps} relmaps");
    let mut in_keyspace = 0u64;
    for r in collect_keyspace(&tl, ReadKind::HttpRequest, lsn).await.unwrap() {
        let mut k = r.start;
        while k < r.end {
            in_keyspace += k.is_rel_block() as u64;
            k = k.next();
        }
    }
    assert_eq!(in_keyspace, pages, "keyspace lists every relation page");
    println!(
        "PostgreSQL {expect_version}: compared {pages} pages of {} relation forks, {slru_segments} SLRU segments, \
         {relmaps} relmap files at {lsn}",
        sizes.len()
    );
    mgr.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres15_base_backup_pages_match() {
    let bin = PathBuf::from("/usr/lib/postgresql/15/bin");
    if !bin.join("initdb").exists() {
        println!("SKIPPED: PostgreSQL 15 binaries not found in {}", bin.display());
        return;
    }
    import_and_compare(&bin, 15).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres16_base_backup_pages_match() {
    let Some(bin) = std::env::var_os("PG16_BIN_DIR").map(PathBuf::from) else {
        println!("SKIPPED: PG16_BIN_DIR is not set (e.g. the pgserver wheel's pginstall/bin)");
        return;
    };
    if !bin.join("initdb").exists() {
        println!("SKIPPED: no initdb in PG16_BIN_DIR={}", bin.display());
        return;
    }
    import_and_compare(&bin, 16).await;
}
