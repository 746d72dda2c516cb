"""Following a primary that writes ordinary WAL (issue 28, item 6 c-e).

The primary is PostgreSQL 15 with data checksums and default WAL settings
(before issue 29 the runs recorded in docs/benchmarks.md kept
`wal_consistency_checking = 'hash,gin,gist,spgist,brin'`, which pgbench
never writes, so they measured the same WAL). Every heap and btree
record without a full-page image is stored as its redo record and redone
when the page is read, so ingest stores records, not pages.

- catch-up of >= 1 GiB of pgbench WAL written while the daemon was stopped,
  beside pg_receivewal receiving the same range from a copy of the daemon's
  slot (MiB/s and records/s; target >= 0.5x of pg_receivewal in bytes);
- steady-state lag under pgbench at full speed for 60 s, sampled every
  100 ms (target p99 < 100 ms);
- the primary's cost of consistency checking: WAL bytes per transaction and
  tps with default settings against `wal_consistency_checking = 'all'`
  with and without `wal_compression = zstd`, alternating in one run (no
  daemon involved).

The catch-up and the primary's cost also run on an index workload (issue
29, item 4: `gin_gist`): pgbench's TPC-B-like script and, with equal
weight, an UPDATE of a table with a jsonb GIN index and an int4range GiST
index (INDEX_SCRIPT), default GIN settings (fastupdate on: pending-list
inserts and flushes). Its cost compares default settings with
`wal_consistency_checking = 'hash,gin,gist,spgist,brin'`, what a primary
had to set before native redo of those AMs.

The catch-up and the primary's cost take minutes: with `--perf-smoke` (CI)
they are skipped (the index catch-up runs tiny: scale 1, 8 MiB, no
target), and the lag test runs 5 s of pgbench asserting lag p99 < 1 s.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psycopg
import pytest

from fixtures.pagestream import parse_lsn
from fixtures.utils import process_memory_mb
from fixtures.wal_bench import (
    current_lsn,
    parse_pgbench,
    percentile,
    pgbench,
    pgbench_popen,
    receivewal_seconds,
    record,
    wait_for_lsn,
    waldump_stats,
)
from fixtures.wal_compare import follow_primary

pytestmark = pytest.mark.perf

# Default WAL settings.
ORDINARY_WAL = {"max_replication_slots": "4"}
RESULTS = "native_redo"
# `perf record -g` of the daemon during the catch-up into this file, if set.
PERF_DATA = os.environ.get("NATIVE_REDO_PERF_DATA")


# -- the index workload (issue 29) ----------------------------------------------------

# Rows of the indexed table per pgbench scale unit (scale 50: 1 M rows).
INDEX_ROWS_PER_SCALE = 20_000
INDEX_SETUP = """
CREATE TABLE docs (id int PRIMARY KEY, body jsonb NOT NULL, span int4range NOT NULL);
INSERT INTO docs
  SELECT i,
         jsonb_build_object('tags', jsonb_build_array('t' || i % 97, 't' || i % 1009),
                            'n', i, 'status', (ARRAY['new', 'open', 'done'])[1 + i % 3]),
         int4range(i * 10, i * 10 + 1 + i % 50)
  FROM generate_series(1, {rows}) i;
CREATE INDEX docs_body ON docs USING gin (body);
CREATE INDEX docs_span ON docs USING gist (span);
"""
# A non-HOT update (indexed columns change): a heap update, a btree insert,
# GIN entries (6 keys and values, into the pending list) and a GiST insert.
INDEX_SCRIPT = """\\set id random(1, {rows})
\\set t random(1, 1000000)
\\set lo random(1, 100000000)
\\set len random(1, 1000)
UPDATE docs SET body = jsonb_build_object('tags', jsonb_build_array('t' || :t % 97, 't' || :t % 1009), 'n', :t, 'status', 'open'), span = int4range(:lo, :lo + :len) WHERE id = :id;
"""
WORKLOADS = ["pgbench", "gin_gist"]


def workload_init(pg, workload: str, scale: int) -> list[str]:
    """`pgbench -i -s scale`, and for `gin_gist` the indexed table of
    INDEX_ROWS_PER_SCALE * scale rows; returns pgbench's script options."""
    pg.pgbench_init(scale)
    if workload == "pgbench":
        return []
    rows = INDEX_ROWS_PER_SCALE * scale
    pg.psql(INDEX_SETUP.format(rows=rows))
    pg.psql("VACUUM ANALYZE docs")  # not in a multi-statement string
    script = pg.root / "gin_gist.sql"
    script.write_text(INDEX_SCRIPT.format(rows=rows))
    script.chmod(0o644)
    return ["-b", "tpcb-like@1", "-f", f"{script}@1"]


def follow_caught_up(ps, pg) -> tuple:
    """A timeline following `pg`, caught up with it."""
    http, tenant, tl = follow_primary(ps, pg, [r"replication failed"])
    wait_for_lsn(http, tenant, tl, current_lsn(pg), timeout=300)
    return http, tenant, tl


# -- (c) catch-up ---------------------------------------------------------------------


@pytest.mark.parametrize("workload", WORKLOADS)
def test_ordinary_wal_catch_up(pageserver, vanilla_pg, test_output_dir, request, workload):
    """pgbench scale CATCH_UP_SCALE (50: a 750 MiB database, so that
    pgbench writes ~10-20 MiB/s of WAL with its full-page images after each
    checkpoint, like a production primary's working set larger than a
    checkpoint cycle) followed, the daemon stopped, its slot copied (same
    restart_lsn), pgbench until >= CATCH_UP_MIB of WAL. Then, one after the
    other: pg_receivewal from the copy, and the restarted daemon until
    `last_record_lsn` reaches the end (start-up included). CPU time of
    each (the daemon's from /proc, pg_receivewal's from rusage; the
    walsender's is in neither) tells a slow run from a starved one.
    `gin_gist`: the index workload beside pgbench (tiny under
    --perf-smoke: scale 1, 8 MiB, 1 s runs)."""
    smoke = request.config.getoption("--perf-smoke")
    if smoke and workload == "pgbench":
        pytest.skip("writes >= 1 GiB of WAL: minutes")
    scale = 1 if smoke else int(os.environ.get("CATCH_UP_SCALE", "50"))
    target = (8 if smoke else int(os.environ.get("CATCH_UP_MIB", "1024"))) * 2**20
    run_s = 1 if smoke else 10
    pg = vanilla_pg.init(ORDINARY_WAL, checksums=True).start()
    ps = pageserver
    scripts = workload_init(pg, workload, scale)
    http, tenant, tl = follow_caught_up(ps, pg)
    slot = http.timeline_get(tenant, tl)["wal_source"]["slot"]
    ps.stop()
    pg.psql(f"SELECT pg_copy_physical_replication_slot('{slot}', 'bench_receivewal')")
    start_lsn = pg.psql("SELECT restart_lsn FROM pg_replication_slots WHERE slot_name = 'bench_receivewal'")
    tx = 0
    while current_lsn(pg) - parse_lsn(start_lsn) < target:
        tx += pgbench(pg, run_s, scripts=scripts).transactions
    end_lsn = pg.psql("SELECT pg_current_wal_insert_lsn()")
    pg.psql("SELECT pg_logical_emit_message(true, 'end', 'x')")  # a record past the end, for pg_receivewal

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    floor_s = receivewal_seconds(pg, "bench_receivewal", end_lsn, test_output_dir / "receivewal")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    floor_cpu_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    shutil.rmtree(test_output_dir / "receivewal")
    t0 = time.monotonic()
    ps.start()
    started_s = time.monotonic() - t0
    profiler = start_profiler(ps.proc.pid) if PERF_DATA else None
    wait_for_lsn(http, tenant, tl, parse_lsn(end_lsn), interval=0.005)
    ours_s = time.monotonic() - t0
    ours_cpu_s = cpu_seconds(ps.proc.pid)
    ours_peak_mb = process_memory_mb(ps.proc.pid)["VmHWM"]  # start-up and catch-up only: a fresh process
    if profiler is not None:
        profiler.send_signal(signal.SIGINT)
        profiler.wait(timeout=120)
    ours_start = streaming_from(ps)
    metrics = http.metrics()
    ingested = metrics.value("pageserver_wal_ingest_records_total")  # counters restart with the daemon
    index_cache_mb = round(metrics.value("pageserver_layer_index_cache_bytes") / 2**20, 1)
    stats = waldump_stats(pg, start_lsn, end_lsn)

    floor_mib = (parse_lsn(end_lsn) - parse_lsn(start_lsn)) / 2**20
    ours_mib = (parse_lsn(end_lsn) - ours_start) / 2**20
    info = http.timeline_get(tenant, tl)
    result = {
        "test": "catch_up",
        "workload": workload,
        "smoke": smoke,
        "scale": scale,
        "pgbench_transactions": tx,
        "wal_mib": round(floor_mib, 1),
        "daemon_wal_mib": round(ours_mib, 1),
        "records": stats.records,
        "fpi_share": round(stats.fpi_bytes / max(1, stats.fpi_bytes + stats.record_bytes), 3),
        "pg_receivewal_s": round(floor_s, 2),
        "pageserver_s": round(ours_s, 2),
        "pageserver_start_s": round(started_s, 2),
        "pg_receivewal_cpu_s": round(floor_cpu_s, 2),
        "pageserver_cpu_s": round(ours_cpu_s, 2),
        "pageserver_peak_rss_mb": ours_peak_mb,
        "layer_index_cache_mb": index_cache_mb,  # bounded by layer_index_cache_size, part of the peak
        "pg_receivewal_mib_per_cpu_s": round(floor_mib / max(0.01, floor_cpu_s), 1),
        "pageserver_mib_per_cpu_s": round(ours_mib / ours_cpu_s, 1),
        "load_average_1m": round(os.getloadavg()[0], 1),
        "pg_receivewal_mib_s": round(floor_mib / floor_s, 1),
        "pageserver_mib_s": round(ours_mib / ours_s, 1),
        "ratio": round((ours_mib / ours_s) / (floor_mib / floor_s), 2),
        "pg_receivewal_records_s": round(stats.records / floor_s),
        "pageserver_records_s": round(ingested / ours_s),
        "pageserver_records": int(ingested),
        "layer_bytes": info["l0_bytes"] + info["in_memory_bytes"],
        # rmgr -> (records, record bytes, image bytes) over the range
        "rmgrs": {k: v for k, v in stats.rmgrs.items() if v[0] > 0},
    }
    record(request, RESULTS, f"Catch-up of ordinary WAL ({workload}) beside pg_receivewal", result)
    pg.psql("SELECT pg_drop_replication_slot('bench_receivewal')")


def streaming_from(ps) -> int:
    """The LSN the daemon's latest replication session started from."""
    lsn = None
    for line in ps.log_lines():
        if m := re.search(r"streaming (?:PostgreSQL timeline \d+ )?from ([0-9A-F]+/[0-9A-F]+)", line):
            lsn = m.group(1)
    assert lsn is not None, "no 'streaming from' line in the daemon's log"
    return parse_lsn(lsn)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_profiler(pid: int) -> subprocess.Popen:
    Path(PERF_DATA).parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        ["perf", "record", "--call-graph", "dwarf", "-F", "499", "-p", str(pid), "-o", PERF_DATA],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


# -- (d) steady-state lag -------------------------------------------------------------


def test_ordinary_wal_steady_state_lag(pageserver, vanilla_pg, request):
    """pgbench -c 4 -j 2 at full speed (60 s at scale 10; 5 s at scale 1
    with --perf-smoke). Every 100 ms: the primary's pg_current_wal_lsn, then
    the timeline detail polled until `last_record_lsn` reaches it. The
    visibility lag is the time from the primary's answer to the first
    detail showing the daemon has ingested that LSN (at least one HTTP
    round trip: `visible_ms` of samples with no byte lag is that floor); the byte lag is the LSN minus the first
    `last_record_lsn` read after it. `lag_ms` (the detail's copy of
    `pageserver_wal_receiver_lag_seconds`: while behind, time since the
    primary's latest message) is recorded too."""
    smoke = request.config.getoption("--perf-smoke")
    runtime, scale = (5, 1) if smoke else (60, 10)
    pg = vanilla_pg.init(ORDINARY_WAL, checksums=True).start()
    ps = pageserver
    pg.pgbench_init(scale)
    http, tenant, tl = follow_caught_up(ps, pg)
    start_lsn = current_lsn(pg)
    bench = pgbench_popen(pg, runtime)
    with psycopg.connect(f"host=127.0.0.1 port={pg.port} user=postgres dbname=postgres", autocommit=True) as conn:
        t0 = time.monotonic()
        samples = sample_lag(conn, http, tenant, tl, bench)
        elapsed = time.monotonic() - t0
    run = parse_pgbench(bench.stdout.read())
    assert bench.returncode == 0
    end_lsn = current_lsn(pg)
    wait_for_lsn(http, tenant, tl, end_lsn, timeout=60)
    visible_ms = [s[0] for s in samples]
    lag_bytes = [s[1] for s in samples]
    gauge_ms = [s[2] for s in samples]
    result = {
        "test": "steady_state_lag",
        "scale": scale,
        "runtime_s": runtime,
        "pgbench_tps": run.tps,
        "wal_mib_s": round((end_lsn - start_lsn) / 2**20 / elapsed, 2),
        "wal_bytes_per_tx": round((end_lsn - start_lsn) / max(1, run.transactions)),
        "samples": len(samples),
        "visible_ms_p50": round(percentile(visible_ms, 0.5), 2),
        "visible_ms_p99": round(percentile(visible_ms, 0.99), 2),
        "visible_ms_max": round(max(visible_ms), 2),
        "visible_ms_p50_when_no_byte_lag": round(percentile([s[0] for s in samples if s[1] == 0], 0.5), 2),
        "lag_bytes_p50": percentile(lag_bytes, 0.5),
        "lag_bytes_p99": percentile(lag_bytes, 0.99),
        "lag_bytes_max": max(lag_bytes),
        "lag_gauge_ms_p50": percentile(gauge_ms, 0.5),
        "lag_gauge_ms_p99": percentile(gauge_ms, 0.99),
        "lag_gauge_ms_max": max(gauge_ms),
        "backpressure_waits": http.metrics().value_or("pageserver_ingest_backpressure_waits_total", 0.0),
    }
    record(request, RESULTS, "Steady-state lag under pgbench, ordinary WAL", result)
    assert len(samples) >= runtime * 5, f"only {len(samples)} samples in {runtime} s"
    if smoke:
        assert result["visible_ms_p99"] < 1000, result


def sample_lag(conn, http, tenant: str, tl: str, bench: subprocess.Popen) -> list[tuple[float, int, int]]:
    """(visibility lag ms, byte lag, lag_ms of the detail) every 100 ms
    while `bench` runs."""
    samples = []
    while bench.poll() is None:
        tick = time.monotonic()
        primary = parse_lsn(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])
        known = time.monotonic()
        detail = http.timeline_get(tenant, tl)
        ingested = parse_lsn(detail["last_record_lsn"])
        lag_bytes, gauge_ms = max(0, primary - ingested), detail["wal_source"]["lag_ms"]
        while ingested < primary and time.monotonic() - known < 30:
            time.sleep(0.001)
            ingested = parse_lsn(http.timeline_get(tenant, tl)["last_record_lsn"])
        samples.append(((time.monotonic() - known) * 1000, lag_bytes, gauge_ms))
        time.sleep(max(0.0, 0.1 - (time.monotonic() - tick)))
    return samples


# -- (e) the primary's cost -----------------------------------------------------------

# name -> ALTER SYSTEM settings (None: RESET to the default).
COST_CONFIGS = {
    "default": {"wal_consistency_checking": None, "wal_compression": None},
    "hash,gin,gist,spgist,brin": {"wal_consistency_checking": "hash,gin,gist,spgist,brin", "wal_compression": None},
    "all, zstd": {"wal_consistency_checking": "all", "wal_compression": "zstd"},
    "all": {"wal_consistency_checking": "all", "wal_compression": None},
}


# The index workload: default settings against what a primary had to set
# before native redo of the five AMs.
INDEX_COST_CONFIGS = {k: COST_CONFIGS[k] for k in ["default", "hash,gin,gist,spgist,brin"]}


@pytest.mark.parametrize("workload", WORKLOADS)
def test_primary_wal_cost(vanilla_pg, request, workload):
    """pgbench scale 10 on one primary (checksums on), the configurations
    alternating in COST_ROUNDS rounds of COST_SECONDS each, switched with
    ALTER SYSTEM and a reload. Steady state: checkpoints are held off for
    the run (checkpoint_timeout 1 h, max_wal_size 64 GB) after a CHECKPOINT
    and a warm-up (10 s runs until fewer than 1 full-page image per 100
    transactions), so that a checkpoint's full-page images land in no
    configuration's segment; pg_stat_wal's wal_fpi per transaction shows
    what is left. WAL bytes are LSN differences (page headers included).
    `gin_gist`: the index workload beside pgbench (INDEX_COST_CONFIGS)."""
    if request.config.getoption("--perf-smoke"):
        pytest.skip("minutes of pgbench; measures PostgreSQL, asserts nothing of the daemon")
    rounds = int(os.environ.get("COST_ROUNDS", "3"))
    seconds = int(os.environ.get("COST_SECONDS", "20"))
    pg = vanilla_pg.init({"checkpoint_timeout": "'1h'", "max_wal_size": "'64GB'"}, checksums=True).start()
    configs = COST_CONFIGS if workload == "pgbench" else INDEX_COST_CONFIGS
    scripts = workload_init(pg, workload, 10)
    pg.psql("CHECKPOINT")
    warm_up = []
    while not warm_up or warm_up[-1]["fpi"] > 0.01 * warm_up[-1]["tx"]:
        assert len(warm_up) < 30, f"still writing full-page images after {len(warm_up)} warm-up runs: {warm_up[-1]}"
        warm_up.append(pgbench_segment(pg, 10, "warm-up", scripts))
    segments = []
    for _ in range(rounds):
        for name, settings in configs.items():
            configure(pg, settings)
            segments.append(pgbench_segment(pg, seconds, name, scripts))
    rows = {}
    for name in configs:
        mine = [s for s in segments if s["config"] == name]
        rows[name] = {
            "wal_bytes_per_tx": round(median([s["wal_bytes"] / s["tx"] for s in mine])),
            "fpi_per_tx": round(median([s["fpi"] / s["tx"] for s in mine]), 3),
            "tps": round(median([s["tps"] for s in mine])),
        }
    base = rows["default"]
    for r in rows.values():
        r["wal_x_default"] = round(r["wal_bytes_per_tx"] / base["wal_bytes_per_tx"], 2)
        r["tps_x_default"] = round(r["tps"] / base["tps"], 2)
    result = {
        "test": "primary_wal_cost",
        "workload": workload,
        "warm_up_s": 10 * len(warm_up),
        "rounds": rounds,
        "seconds": seconds,
        "configs": rows,
        "segments": segments,
    }
    record(request, RESULTS, f"The primary's WAL per transaction and tps ({workload})", result)


def pgbench_segment(pg, seconds: int, name: str, scripts: list[str]) -> dict:
    """One pgbench run: tps, transactions, WAL bytes, full-page images."""
    pg.psql("SELECT pg_stat_reset_shared('wal')")
    start = current_lsn(pg)
    run = pgbench(pg, seconds, scripts=scripts)
    wal = current_lsn(pg) - start
    time.sleep(0.5)  # pgbench's backends report their WAL statistics as they exit
    fpi = int(pg.psql("SELECT wal_fpi FROM pg_stat_wal"))
    return {"config": name, "tps": run.tps, "tx": run.transactions, "wal_bytes": wal, "fpi": fpi}


def configure(pg, settings: dict[str, str | None]) -> None:
    for key, value in settings.items():
        pg.psql(f"ALTER SYSTEM RESET {key}" if value is None else f"ALTER SYSTEM SET {key} = '{value}'")
    pg.psql("SELECT pg_reload_conf()")
    want = settings["wal_consistency_checking"] or ""
    deadline = time.monotonic() + 10
    while pg.psql("SHOW wal_consistency_checking") != want:  # a new session sees the reloaded file
        assert time.monotonic() < deadline, f"wal_consistency_checking is not {want!r} after a reload"
        time.sleep(0.05)


def median(values: list[float]) -> float:
    return percentile(values, 0.5)
