"""Native WAL redo (issue 28), end to end on PostgreSQL 15-18.

- With `wal_redo_check = true` the daemon redoes every record of a native
  rmgr whose block carries PostgreSQL's consistency image and compares its
  page with that image under PostgreSQL's masks: the workload of
  fixtures/redo_workload.py (every Heap, Heap2, Btree, Sequence and Generic
  record kind) must give zero mismatches and a checked count for every kind.
  The live check runs on the oldest and newest majors (15, 18): the record
  formats of every major are checked record by record against real WAL of
  all four by `cargo test -p postgres_ffi --test redo_oracle`.
- A primary with PostgreSQL's default WAL settings (no consistency
  checking) is followed through pgbench and the workload: the served pages
  equal the primary's files (and carry valid checksums) at several LSNs,
  after kill -9 of the daemon and after a restart of the primary; a fullbackup at two LSNs starts
  an unmodified PostgreSQL that passes pg_checksums, pg_amcheck and holds
  the primary's rows at that LSN.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest

from fixtures import redo_workload
from fixtures.backup import fetch_backup, restore, table_checksums
from fixtures.pagestream import RelTag, parse_lsn
from fixtures.vanilla_pg import PG_BIN_DIRS, VanillaPostgres, pg_bin_dir
from fixtures.wal_compare import checksum_valid, compare_slru_with_primary, compare_with_primary, follow_primary
from fixtures.utils import fmt_lsn
from test_wal_ingest import PRIMARY_GONE, WAL_COMPRESSION, wait_for_lsn

WAL_SEG = 16 << 20


@pytest.fixture(params=[15, 16, 17, 18], ids=lambda v: f"pg{v}")
def major(request) -> int:
    if pg_bin_dir(request.param) is None:
        pytest.fail(f"PostgreSQL {request.param} is not installed: run scripts/install-test-deps.sh")
    return request.param


def make_primary(major: int, out: Path, port: int, conf: dict[str, str]) -> VanillaPostgres:
    pg = VanillaPostgres(out / f"pg{major}", port, bin_dir=pg_bin_dir(major))
    pg.major = major
    pg.init({"max_replication_slots": "4", **conf}, checksums=True).start()
    assert pg.psql("SHOW data_checksums") == "on"
    return pg


@pytest.fixture
def primaries():
    made: list[VanillaPostgres] = []
    yield made
    for pg in made:
        pg.stop(mode="immediate")
        pg.release()


def caught_up(http, tenant: str, timeline: str, pg) -> int:
    """The timeline's last_record_lsn once it has everything the primary
    wrote (its insert position may sit just past a page header)."""
    insert = parse_lsn(pg.psql("SELECT pg_current_wal_insert_lsn()"))
    header = 40 if insert % WAL_SEG == 40 else 24 if insert % 8192 == 24 else 0
    info = wait_for_lsn(http, tenant, timeline, insert - header, timeout=120)
    return parse_lsn(info["last_record_lsn"])


# -- (a) every record kind, checked against PostgreSQL's own images -------------------------


def redo_check_table(metrics) -> dict[tuple[str, str], tuple[int, int]]:
    """(rmgr, record) -> (checked, mismatches), summed over every other label."""
    out: dict[tuple[str, str], list[int]] = {}
    for name, col in (("pageserver_redo_check_records_total", 0), ("pageserver_redo_check_mismatches_total", 1)):
        for s in metrics.query(name):
            key = (s.labels.get("rmgr", "?"), s.labels.get("record", "?"))
            out.setdefault(key, [0, 0])[col] += int(s.value)
    return {k: (v[0], v[1]) for k, v in out.items()}


@pytest.fixture(params=[15, 18], ids=lambda v: f"pg{v}")
def redo_check_major(request) -> int:
    """The majors of the live redo check (module comment: the oracle test
    covers 16 and 17 record by record)."""
    if pg_bin_dir(request.param) is None:
        pytest.fail(f"PostgreSQL {request.param} is not installed: run scripts/install-test-deps.sh")
    return request.param


def test_redo_check_every_record_kind(
    pageserver_factory, primaries, redo_check_major, test_output_dir, port_distributor
):
    major = redo_check_major
    pg = make_primary(
        major, test_output_dir, port_distributor.get(),
        {"wal_consistency_checking": "'all'", "wal_compression": WAL_COMPRESSION[major]},
    )  # fmt: skip
    primaries.append(pg)
    ps = pageserver_factory.create(overrides={"wal_redo_check": True}).start()
    http, tenant, timeline = follow_primary(ps, pg, PRIMARY_GONE)
    start = pg.psql("SELECT pg_current_wal_insert_lsn()")
    redo_workload.run(pg)
    caught_up(http, tenant, timeline, pg)

    table = redo_check_table(http.metrics())
    lines = ["rmgr\trecord\tchecked\tmismatches"]
    lines += [f"{r}\t{k}\t{c}\t{m}" for (r, k), (c, m) in sorted(table.items())]
    (test_output_dir / "redo_coverage.tsv").write_text("\n".join(lines) + "\n")
    print(f"\nredo check coverage, PostgreSQL {major}:\n" + "\n".join(lines))

    mismatched = {k: v for k, v in table.items() if v[1]}
    assert not mismatched, f"native redo differs from PostgreSQL's images: {mismatched} (see the daemon's log)"
    unchecked = sorted(k for k in redo_workload.expected_checked(major) if table.get(k, (0, 0))[0] == 0)
    if unchecked:
        # Tell a workload that no longer makes a record kind from a daemon
        # that does not check it: what the WAL itself holds (the slot keeps it).
        end = pg.psql("SELECT pg_current_wal_flush_lsn()")
        in_wal = redo_workload.wal_record_stats(pg, start, end)
        found = {k: in_wal.get(k, 0) for k in unchecked}
        pytest.fail(f"PostgreSQL {major}: no checked record of {unchecked}; the WAL holds {found} of them")


# -- (b) a primary with default WAL settings ------------------------------------------------


def assert_matches(ps, tenant, timeline, pg, what: str) -> int:
    pg.psql("CHECKPOINT")
    lsn = parse_lsn(pg.psql("SELECT pg_current_wal_insert_lsn()"))
    wait_for_lsn(ps.http_client(), tenant, timeline, lsn, timeout=120)
    res = compare_with_primary(ps, tenant, timeline, pg, lsn, checksums=True)
    compare_slru_with_primary(ps, tenant, timeline, pg, lsn, res)
    assert res.pages > 100 and res.databases >= 2, res
    assert res.pages_identical + res.checksums_verified > 100, f"{what}: checksums not verified: {res}"
    assert not res.mismatches, f"{what}: {len(res.mismatches)} mismatches of {res.pages} pages:\n" + "\n".join(res.mismatches[:40])
    return lsn


def pgbench(pg, *args: str) -> None:
    pg.run("pgbench", "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres", *args, "postgres")


def checksums_tool(major: int) -> Path | None:
    """A pg_checksums that reads `major`'s control file: the build's own, or
    one of the same pg_control version (15's for 16: both 1300). 17's build
    has none and 18's refuses 17's control file (1700 vs 1800)."""
    for m in (major, 15) if major == 16 else (major,):
        tool = PG_BIN_DIRS[m] / "pg_checksums"
        if tool.exists():
            return tool
    return None


def amcheck_tool(major: int) -> Path | None:
    """pg_amcheck for `major`: the build's own (15, 18), 18's for 17 (the npm
    build has no clients). 16's build has the client but not the amcheck
    extension: None (rows are counted through the indexes instead)."""
    for m in {15: (15,), 16: (), 17: (18,), 18: (18,)}[major]:
        tool = PG_BIN_DIRS[m] / "pg_amcheck"
        if tool.exists():
            return tool
    return None


def run_as_postgres(pg: VanillaPostgres, exe: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [str(exe), *args]
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    env = dict(os.environ, PGHOST="127.0.0.1", PGPORT=str(pg.port), PGUSER="postgres")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd="/")


def served_checksums(ps, tenant, timeline, lsn: int, pg_checksums_errors: str) -> str:
    """For each block pg_checksums reported: whether GetPage at `lsn` serves it
    with a valid checksum (tells the fullbackup path from the read path)."""
    lines = []
    pat = r'in file "[^"]*/(global|base/(\d+))/(\d+)(_vm|_fsm|_init)?(?:\.(\d+))?", block (\d+)'
    with ps.pagestream(tenant, timeline) as c:
        for m in re.finditer(pat, pg_checksums_errors):
            spc, db = (1664, 0) if m.group(1) == "global" else (1663, int(m.group(2)))
            fork = {None: 0, "_fsm": 1, "_vm": 2, "_init": 3}[m.group(4)]
            blk = int(m.group(6)) + int(m.group(5) or 0) * 131072
            resp = c.get_page(RelTag(spc, db, int(m.group(3)), fork), blk, lsn=lsn)
            page = getattr(resp, "page", None)
            ok = page is not None and checksum_valid(page, blk)
            lines.append(f"{m.group(0)}: GetPage {'valid' if ok else 'INVALID'} checksum" + ("" if page else f" ({resp})"))
    return "\n".join(lines[:20])


def count_through_indexes(pg: VanillaPostgres) -> int:
    """Every btree index on a plain column of a permanent user table, read
    in full by an index-only scan, counts the rows a sequential scan counts
    (where amcheck is missing); returns the number of indexes read."""
    checked = 0
    for db in pg.psql("SELECT datname FROM pg_database WHERE datallowconn AND NOT datistemplate").splitlines():
        with redo_workload.connect(pg, db) as c:
            rows = c.execute(
                "SELECT format('%I.%I', n.nspname, t.relname), format('%I', a.attname) FROM pg_index i "
                "JOIN pg_class t ON t.oid = i.indrelid JOIN pg_class ic ON ic.oid = i.indexrelid "
                "JOIN pg_am am ON am.oid = ic.relam JOIN pg_namespace n ON n.oid = t.relnamespace "
                "JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = i.indkey[0] "
                "WHERE am.amname = 'btree' AND i.indkey[0] > 0 AND i.indpred IS NULL AND t.relpersistence = 'p' "
                "AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'"
            ).fetchall()
            for table, col in rows:
                c.execute("SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off; SET enable_seqscan = on")
                seq = c.execute(f"SELECT count({col}) FROM {table}").fetchone()[0]
                c.execute("SET enable_seqscan = off; SET enable_indexonlyscan = on; SET enable_indexscan = on")
                idx = c.execute(f"SELECT count({col}) FROM {table} WHERE {col} IS NOT NULL").fetchone()[0]
                assert seq == idx, f"{db}.{table} ({col}): {seq} rows by a sequential scan, {idx} through its index"
                checked += 1
    assert checked > 0, "no btree index read"
    return checked


def gin_index_check(pg: VanillaPostgres) -> int | None:
    """amcheck's gin_index_check (18+) on every GIN index of every database;
    the number checked, or None where amcheck has no such function."""
    checked = 0
    for db in pg.psql("SELECT datname FROM pg_database WHERE datallowconn").splitlines():
        with redo_workload.connect(pg, db) as c:
            c.execute("CREATE EXTENSION IF NOT EXISTS amcheck")
            if not c.execute("SELECT count(*) FROM pg_proc WHERE proname = 'gin_index_check'").fetchone()[0]:
                return None
            rows = c.execute(
                "SELECT c.oid::regclass::text FROM pg_class c JOIN pg_am a ON a.oid = c.relam "
                "WHERE a.amname = 'gin' AND c.relpersistence = 'p' AND c.relkind = 'i'"
            ).fetchall()
            for (index,) in rows:
                c.execute("SELECT gin_index_check(%s::regclass)", (index,))
                checked += 1
    return checked


def verify_fullbackup(ps, tenant, timeline, lsn: int, major: int, expected: dict, out: Path, port: int) -> str:
    """A fullbackup at `lsn`: offline pg_checksums, then started: the
    primary's rows, pg_amcheck --heapallindexed (or index counts), every
    page read with checksum verification where no pg_checksums reads the
    major. Returns what was checked."""
    tar = fetch_backup(ps, "fullbackup", tenant, timeline, out / f"full_{lsn:X}.tar", fmt_lsn(lsn))
    pg = restore(tar, out / f"restored_{lsn:X}", port, major)
    done = []
    try:
        tool = checksums_tool(major)
        if tool is not None:
            res = run_as_postgres(pg, tool, "-c", "-D", str(pg.datadir))
            if res.returncode != 0 or "Bad checksums:  0" not in res.stdout:
                served = served_checksums(ps, tenant, timeline, lsn, res.stderr)
                raise AssertionError(f"{tool} -c at {fmt_lsn(lsn)}:\n{res.stdout}\n{res.stderr}\nthe same blocks by GetPage at that LSN:\n{served}")
            done.append(f"{tool} -c")
        pg.start()
        assert pg.psql("SHOW data_checksums") == "on"
        got = table_checksums(pg)
        assert got == expected, f"PostgreSQL {major} at {fmt_lsn(lsn)}: tables differ from the primary's:\n{got}\n{expected}"
        done.append(f"{len(got)} tables' rows")
        amcheck = amcheck_tool(major)
        if amcheck is not None:
            res = run_as_postgres(pg, amcheck, "--all", "--install-missing", "--heapallindexed")
            assert res.returncode == 0, f"{amcheck} at {fmt_lsn(lsn)}:\n{res.stdout}\n{res.stderr}"
            done.append(f"{amcheck} --heapallindexed")
            n = gin_index_check(pg)
            if n is not None:
                done.append(f"gin_index_check on {n} GIN indexes")
        else:
            # No amcheck extension (16): every btree index of a user table
            # read in full must count the rows a sequential scan counts.
            n = count_through_indexes(pg)
            done.append(f"row counts through {n} btree indexes (no amcheck extension)")
        if tool is None:
            # Every block of every relation read through shared buffers,
            # which verifies its checksum (an error fails the query).
            for db in pg.psql("SELECT datname FROM pg_database WHERE datallowconn").splitlines():
                pg.psql("CREATE EXTENSION IF NOT EXISTS pg_prewarm", dbname=db)
                pg.psql(
                    "SELECT sum(pg_prewarm(c.oid, 'buffer', f)) FROM pg_class c, unnest(ARRAY['main', 'vm']) f "
                    "WHERE c.relkind IN ('r', 'i', 't', 'm', 'S') AND c.relpersistence = 'p' "
                    "AND pg_relation_size(c.oid, f) > 0",
                    dbname=db,
                )
            failures = pg.psql("SELECT coalesce(sum(checksum_failures), 0) FROM pg_stat_database")
            assert failures == "0", f"{failures} checksum failures reading the restored cluster"
            done.append("every page read with checksum verification (no pg_checksums reads this major)")
    finally:
        pg.stop(mode="immediate")
        pg.remove()
    return ", ".join(done)


class Steps:
    """Prints how long each step took (pytest -s), to keep the file fast."""

    def __init__(self, what: str):
        self.what, self.t = what, time.monotonic()

    def __call__(self, step: str) -> None:
        now = time.monotonic()
        print(f"{self.what}: {step} {now - self.t:.1f} s")
        self.t = now


def test_follow_default_wal_settings(pageserver, primaries, major, test_output_dir, port_distributor):
    ps = pageserver
    step = Steps(f"PostgreSQL {major}")
    pg = make_primary(major, test_output_dir, port_distributor.get(), {})
    assert pg.psql("SHOW wal_consistency_checking") == ""
    primaries.append(pg)
    assert pg.psql("SHOW wal_compression") == "off" and pg.psql("SHOW full_page_writes") == "on"
    http, tenant, timeline = follow_primary(ps, pg, PRIMARY_GONE)
    step("follow")

    pg.pgbench_init(1)
    pgbench(pg, "-n", "-c", "2", "-T", "2")
    points = [(caught_up(http, tenant, timeline, pg), table_checksums(pg))]
    step("pgbench")
    # The workload with pgbench alongside.
    bench = threading.Thread(target=pgbench, args=(pg, "-n", "-c", "1", "-T", "2"))
    bench.start()
    try:
        redo_workload.run(pg)
    finally:
        bench.join()
    step("workload")
    # kill -9 while the daemon is still ingesting the workload's WAL.
    ps.kill()
    ps.start()
    pg.psql("UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid % 97 = 0")
    assert_matches(ps, tenant, timeline, pg, "after pgbench, the redo workload and kill -9 of the daemon")
    step("kill -9, compare 1")

    pg.stop()
    pg.start()
    pgbench(pg, "-n", "-c", "2", "-t", "50")
    assert_matches(ps, tenant, timeline, pg, "after a restart of the primary")
    step("primary restart, compare 2")
    points.append((caught_up(http, tenant, timeline, pg), table_checksums(pg)))
    src = http.timeline_get(tenant, timeline)["wal_source"]
    assert src["state"] == "streaming", src

    for lsn, expected in points:
        what = verify_fullbackup(ps, tenant, timeline, lsn, major, expected, test_output_dir, port_distributor.get())
        step(f"fullbackup at {fmt_lsn(lsn)}: {what}")
