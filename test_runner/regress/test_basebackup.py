"""`basebackup` and `fullbackup` on the page service: an unmodified
PostgreSQL of the timeline's major starts on a fullbackup, at several LSNs
of a timeline following a live primary (pgbench + DDL) and of an imported
base backup, with every table equal to the primary's at that LSN and amcheck
clean; the basebackup (Neon's compute format) is checked file by file; bad
requests get clear errors and the session goes on."""

from __future__ import annotations

import gzip
import subprocess
import tarfile
import threading
from pathlib import Path

import pytest

from fixtures.backup import check_indexes, fetch_backup, restore, table_checksums
from fixtures.compare import import_backup
from fixtures.http import PageserverApiError
from fixtures.libpq import ServerError
from fixtures.pagestream import parse_lsn
from fixtures.vanilla_pg import PG_BIN_DIRS
from fixtures.wal_compare import follow_primary
from fixtures.utils import fmt_lsn
from test_wal_ingest import PRIMARY_GONE, primary, wait_for_lsn  # noqa: F401 (fixture)

WAL_SEG = 16 << 20


def normalize(lsn: int) -> int:
    """Where PostgreSQL's checkpoint lands for `lsn`: past a page header."""
    page_start = lsn - lsn % 8192
    return max(lsn, page_start + (40 if page_start % WAL_SEG == 0 else 24))


# DDL run alongside pgbench, one list per pause point.
ROUNDS = [
    [
        "CREATE TABLE ddl1 (id int PRIMARY KEY, v text)",
        "INSERT INTO ddl1 SELECT g, md5(g::text) FROM generate_series(1, 3000) g",
        "CREATE INDEX ddl1_v ON ddl1 (v)",
        "CREATE UNLOGGED TABLE ul (x int PRIMARY KEY); INSERT INTO ul SELECT generate_series(1, 500)",
    ],
    [
        "ALTER TABLE ddl1 ADD COLUMN w int DEFAULT 7",
        "UPDATE ddl1 SET w = id % 5 WHERE id % 2 = 0",
        "DELETE FROM ddl1 WHERE id % 9 = 0",
        "CREATE TABLE gone AS SELECT g AS x FROM generate_series(1, 100) g",
        "BEGIN; INSERT INTO ddl1 VALUES (100001, 'prepared'); PREPARE TRANSACTION 'open1'",
        "CREATE DATABASE other",
        ("other", "CREATE TABLE o AS SELECT g, g * 2 AS h FROM generate_series(1, 2000) g; CREATE INDEX ON o (h)"),
    ],
    [
        "COMMIT PREPARED 'open1'",
        "DROP TABLE gone",
        "TRUNCATE pgbench_history",
        "VACUUM ddl1",
        "CREATE INDEX ON pgbench_accounts (abalance)",
    ],
]


def run_round(pg, ddl) -> None:
    """pgbench for 3 s with the DDL alongside; returns once both are done
    (the workload is then paused)."""
    args = ("pgbench", "-n", "-T", "3", "-c", "2", "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres", "postgres")
    bench = threading.Thread(target=pg.run, args=args)
    bench.start()
    for stmt in ddl:
        db, sql = stmt if isinstance(stmt, tuple) else ("postgres", stmt)
        pg.psql(sql, dbname=db)
    bench.join()


def caught_up(http, tenant: str, timeline: str, pg) -> int:
    """The timeline's last_record_lsn once it has everything the paused
    primary wrote (its insert position may sit just past a page header)."""
    insert = parse_lsn(pg.psql("SELECT pg_current_wal_insert_lsn()"))
    header = 40 if insert % WAL_SEG == 40 else 24 if insert % 8192 == 24 else 0
    info = wait_for_lsn(http, tenant, timeline, insert - header)
    return parse_lsn(info["last_record_lsn"])


def start_on_fullbackup(ps, tenant, timeline, lsn: int, major: int, out: Path, port: int):
    tar = fetch_backup(ps, "fullbackup", tenant, timeline, out / f"full_{lsn:X}.tar", fmt_lsn(lsn))
    pg = restore(tar, out / f"restored_{lsn:X}", port, major)
    pg.start()
    return pg


def verify_restored(pg, expected: dict[str, str], what: str) -> None:
    try:
        got = table_checksums(pg)
        assert got == expected, f"{what}: tables differ from the primary's:\n{got}\n{expected}"
        assert check_indexes(pg) > 0, f"{what}: no index checked"
    finally:
        pg.stop(mode="immediate")
        pg.remove()


def test_fullbackup_starts_postgres_at_several_lsns(pageserver, primary, test_output_dir, port_distributor):  # noqa: F811
    pg, major = primary, primary.major
    pg.pgbench_init(1)
    http, tenant, timeline = follow_primary(pageserver, pg, PRIMARY_GONE)
    points = []
    for ddl in ROUNDS:
        run_round(pg, ddl)
        expected = table_checksums(pg)
        points.append((caught_up(http, tenant, timeline, pg), expected))
    assert len({lsn for lsn, _ in points}) == len(ROUNDS)
    # Every point read after the whole workload: history, not the latest state.
    for lsn, expected in points:
        restored = start_on_fullbackup(pageserver, tenant, timeline, lsn, major, test_output_dir, port_distributor.get())
        verify_restored(restored, expected, f"PostgreSQL {major} at {fmt_lsn(lsn)}")
    check_basebackup(pageserver, tenant, timeline, points[-1][0], major, test_output_dir)


def test_fullbackup_of_imported_backup(pageserver, small_backup, test_output_dir, port_distributor):
    """A timeline imported from a pg_basebackup tar (PostgreSQL 15): the
    data generated by the `small_backup` fixture, by content."""
    tl = import_backup(pageserver, small_backup)
    lsn = parse_lsn(pageserver.http_client().timeline_get(tl.tenant_id, tl.timeline_id)["last_record_lsn"])
    pg = start_on_fullbackup(pageserver, tl.tenant_id, tl.timeline_id, lsn, 15, test_output_dir, port_distributor.get())
    check_http_fullbackup(pageserver, tl.tenant_id, tl.timeline_id, lsn, test_output_dir)
    try:
        assert pg.psql("SELECT count(*), sum(id), bool_and(v = repeat('x', 100)) FROM t") == "20000|200010000|t"
        assert pg.psql("SELECT count(*), sum(g) FROM u", dbname="other") == "1000|500500"
        assert check_indexes(pg) > 0
    finally:
        pg.stop(mode="immediate")
        pg.remove()


def tar_files(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as t:
        return {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}


def check_http_fullbackup(ps, tenant: str, timeline: str, lsn: int, out: Path) -> None:
    """GET .../fullbackup streams the same files as the libpq command."""
    http = ps.http_client()
    path = f"/v1/tenant/{tenant}/timeline/{timeline}/fullbackup"
    dest = out / "http_full.tar"
    with http.request("GET", path, params={"lsn": fmt_lsn(lsn)}, stream=True) as r:
        assert r.status_code == 200 and r.headers["content-type"] == "application/x-tar", r.text
        assert "content-length" not in r.headers, "streamed, not buffered"
        with open(dest, "wb") as f:
            for chunk in r.iter_content(1 << 20):
                f.write(chunk)
    assert tar_files(dest) == tar_files(out / f"full_{lsn:X}.tar")
    with pytest.raises(PageserverApiError) as e:
        http.request("GET", path, params={"lsn": fmt_lsn(lsn + 8)})
    assert e.value.status == 400 and "outside the readable range" in e.value.msg, e.value
    with pytest.raises(PageserverApiError) as e:
        http.request("GET", path, params={"lsn": "nope"})
    assert e.value.status == 400, e.value


def control_data(major: int, datadir: Path) -> dict[str, str] | None:
    tool = PG_BIN_DIRS[major] / "pg_controldata"
    if not tool.exists():
        return None  # the npm build of 17 has no client programs
    out = subprocess.run([str(tool), str(datadir)], capture_output=True, text=True, check=True).stdout
    return dict(line.split(":", 1) for line in out.splitlines() if ":" in line)


def check_basebackup(ps, tenant: str, timeline: str, lsn: int, major: int, out: Path) -> None:
    plain = fetch_backup(ps, "basebackup", tenant, timeline, out / "base.tar", fmt_lsn(lsn))
    gz = fetch_backup(ps, "basebackup", tenant, timeline, out / "base.tar.gz", fmt_lsn(lsn), "--gzip")
    full = out / f"full_{lsn:X}.tar"
    fetch_backup(ps, "fullbackup", tenant, timeline, full, fmt_lsn(lsn))
    with tarfile.open(plain) as t:
        files = {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}
        dirs = {m.name for m in t.getmembers() if m.isdir()}
        names = [m.name for m in t.getmembers()]
    with tarfile.open(fileobj=gzip.open(gz)) as t:
        unzipped = {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}
    assert unzipped == files, "--gzip: the same files"
    # The daemon keeps no replication slot state: --replica has nothing to leave out.
    replica = fetch_backup(ps, "basebackup", tenant, timeline, out / "replica.tar", fmt_lsn(lsn), "--replica")
    assert tar_files(replica) == files
    for d in ["global", "base", "pg_wal", "pg_xact", "pg_multixact/offsets", "pg_twophase", "pg_replslot", "pg_tblspc"]:
        assert d in dirs, f"directory {d} missing"
    assert files["PG_VERSION"] == f"{major}\n".encode()
    assert files["pg_ident.conf"] == b"" and files["postgresql.auto.conf"] == b""
    assert b"trust" in files["pg_hba.conf"]
    assert "postgresql.conf" not in files and "backup_label" not in files
    relmap = 512 if major == 15 else 524
    assert len(files["global/pg_filenode.map"]) == relmap
    dbs = [n.split("/")[1] for n in files if n.startswith("base/") and n.endswith("/pg_filenode.map")]
    assert len(dbs) >= 3, dbs  # template1, postgres, other (template0 too)
    for db in dbs:
        assert len(files[f"base/{db}/pg_filenode.map"]) == relmap and files[f"base/{db}/PG_VERSION"] == f"{major}\n".encode()
    assert any(n.startswith("pg_xact/") for n in files) and any(n.startswith("pg_multixact/offsets/") for n in files)
    rel_files = [n for n in files if n.startswith(("base/", "global/")) and n.split("/")[-1].split("_")[0].isdigit()]
    init_forks = [n for n in rel_files if n.endswith("_init")]
    assert init_forks, "the unlogged table's init forks"
    for n in rel_files:
        if not n.endswith("_init"):
            assert n + "_init" in files and files[n] == b"", f"{n}: relation data in a basebackup"
    assert files["neon.signal"] == files["zenith.signal"] and files["zenith.signal"].startswith(b"PREV LSN: ")
    assert names[-4:-1] == ["neon.signal", "zenith.signal", "global/pg_control"]
    wal = names[-1]
    assert wal.startswith("pg_wal/") and len(files[wal]) == WAL_SEG
    start = normalize(lsn)
    with tarfile.open(full) as t:
        full_wal = t.extractfile(wal).read()
    # The basebackup's segment: the fullbackup's up to the LSN (headers), zeros after.
    off = start % WAL_SEG
    assert files[wal][:off] == full_wal[:off] and files[wal][off:] == bytes(WAL_SEG - off)
    assert full_wal[off:off + 4] != b"\0\0\0\0", "the fullbackup has a checkpoint record at the LSN"
    datadir = out / "base_extracted"
    with tarfile.open(plain) as t:
        t.extractall(datadir, filter="fully_trusted")
    cd = control_data(major, datadir)
    if cd is not None:
        assert cd["Latest checkpoint location"].strip() == fmt_lsn(start), cd
        assert cd["Latest checkpoint's REDO location"].strip() == fmt_lsn(start), cd
        assert cd["Database cluster state"].strip() == "shut down", cd
    waldump = PG_BIN_DIRS[major] / "pg_waldump"
    if waldump.exists() and major in (15, 18):  # the only builds whose pg_waldump reads their own WAL here
        (datadir / "full_wal").mkdir()
        (datadir / "full_wal" / Path(wal).name).write_bytes(full_wal)
        res = subprocess.run([str(waldump), "-p", str(datadir / "full_wal"), Path(wal).name], capture_output=True, text=True)
        assert f"CHECKPOINT_SHUTDOWN redo {fmt_lsn(start)}" in res.stdout, res.stdout + res.stderr


def test_backup_errors_keep_the_session(pageserver_factory, small_backup, test_output_dir):
    ps = pageserver_factory.create(overrides={"wait_lsn_timeout": "300 ms"}).start()
    tl = import_backup(ps, small_backup)
    t, l = tl.tenant_id, tl.timeline_id
    lsn = parse_lsn(ps.http_client().timeline_get(t, l)["last_record_lsn"])
    other = "00000000000000000000000000000001"
    cases = [
        (f"basebackup {other} {l}", "not found"),
        (f"basebackup {t} {other}", "not found"),
        (f"fullbackup {t} {l} {fmt_lsn(lsn + 8)}", f"LSN {fmt_lsn(lsn + 8)} is beyond the timeline's last_record_lsn {fmt_lsn(lsn)}"),
        (f"basebackup {t} {l} 0/8", "LSN 0/8 is below the timeline's first readable LSN"),
        (f"basebackup {t} {l} {fmt_lsn(lsn + 4)}", "not a record boundary"),
        (f"basebackup {t}", "usage: basebackup <tenant_id> <timeline_id>"),
        (f"basebackup {t} {l} banana", "invalid LSN 'banana'"),
        (f"basebackup {t} {l} --zip", "unknown option '--zip'"),
        (f"fullbackup {t} {l} --gzip", "unknown option '--gzip'"),
    ]
    with ps.libpq() as conn:
        for query, fragment in cases:
            with pytest.raises(ServerError) as e, open(test_output_dir / "never.tar", "wb") as f:
                conn.copy_out(query, f)
            assert fragment in e.value.message, f"{query}: {e.value.message}"
        # The same session still serves a backup.
        with open(test_output_dir / "ok.tar", "wb") as f:
            assert conn.copy_out(f"basebackup {t} {l} latest", f) > WAL_SEG
    assert tarfile.open(test_output_dir / "ok.tar").getmember("global/pg_control").size == 8192
