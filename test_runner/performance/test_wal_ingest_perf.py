"""Catch-up ingest of payload-only WAL, side by side with pg_receivewal.

A PostgreSQL 15 primary (wal_consistency_checking = all, zstd) is followed
by the daemon. The daemon is stopped; the primary writes non-transactional
logical messages of one size from several sessions (no page changes: the
WAL is payload); a second slot created at the same moment keeps the same
WAL for pg_receivewal. Then, measured one after the other on the same WAL
range: pg_receivewal receiving it to local disk (fsync per segment, the
physical floor of receiving it), and the restarted daemon ingesting it until
`last_record_lsn` reaches the end. The ratio daemon/pg_receivewal is the
figure; absolute MiB/s vary with the shared machine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time

import pytest

from fixtures.pageserver import TEST_OUTPUT
from fixtures.pagestream import ErrorResponse, RelTag, parse_lsn
from fixtures.wal_compare import follow_primary

pytestmark = pytest.mark.perf

SETTINGS = {
    "wal_consistency_checking": "'all'",
    "wal_compression": "zstd",
    "max_replication_slots": "4",
    "max_wal_size": "'4GB'",
}
SESSIONS = 4


def emit(pg, size: int, total_bytes: int) -> None:
    per_session = total_bytes // size // SESSIONS
    sql = f"SELECT count(pg_logical_emit_message(false, 'bench', repeat('x', {size}))) FROM generate_series(1, {per_session})"
    threads = [threading.Thread(target=pg.psql, args=(sql,)) for _ in range(SESSIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def receivewal_seconds(pg, slot: str, end_lsn: str, dest) -> float:
    if dest.exists():
        shutil.rmtree(dest)
    pg.mkdir(dest)
    start = time.monotonic()
    cmd = pg._cmd(
        "pg_receivewal", "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres", "-D", str(dest),
        "--slot", slot, "-E", end_lsn, "-n",
    )
    subprocess.run(cmd, check=True, capture_output=True, timeout=600, cwd="/")
    return time.monotonic() - start


@pytest.mark.parametrize("size", [1024, 8192, 131072], ids=lambda s: f"{s // 1024}KiB")
def test_payload_wal_catch_up(pageserver, vanilla_pg, test_output_dir, size, request):
    smoke = request.config.getoption("--perf-smoke")
    total = (64 if smoke else 512) * 1024 * 1024
    pg = vanilla_pg.init(SETTINGS).start()
    ps = pageserver
    http, tenant, tl = follow_primary(ps, pg, [r"replication failed"])
    ps.stop()
    pg.psql("SELECT pg_create_physical_replication_slot('bench_receivewal', true)")
    start_lsn = pg.psql("SELECT restart_lsn FROM pg_replication_slots WHERE slot_name = 'bench_receivewal'")
    emit(pg, size, total)
    end_lsn = pg.psql("SELECT pg_current_wal_insert_lsn()")
    # pg_receivewal stops once it has received WAL past -E; a committed
    # message flushes everything and puts a record after the end.
    pg.psql("SELECT pg_logical_emit_message(true, 'end', 'x')")
    wal_mib = (parse_lsn(end_lsn) - parse_lsn(start_lsn)) / 2**20

    floor_s = receivewal_seconds(pg, "bench_receivewal", end_lsn, test_output_dir / "receivewal")
    t0 = time.monotonic()
    ps.start()
    while parse_lsn(http.timeline_get(tenant, tl)["last_record_lsn"]) < parse_lsn(end_lsn):
        time.sleep(0.01)
    ours_s = time.monotonic() - t0

    result = {
        "message_bytes": size,
        "wal_mib": round(wal_mib, 1),
        "pg_receivewal_mib_s": round(wal_mib / floor_s, 1),
        "pageserver_mib_s": round(wal_mib / ours_s, 1),
        "ratio": round(floor_s / ours_s, 2),
    }
    out = TEST_OUTPUT / "perf"
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "wal_ingest.jsonl", "a") as f:
        f.write(json.dumps(result) + "\n")
    request.config.perf_summaries.append((f"WAL catch-up, {size // 1024} KiB messages", json.dumps(result)))
    pg.psql("SELECT pg_drop_replication_slot('bench_receivewal')")


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else 0.0


def test_steady_state_lag_under_pgbench(pageserver, vanilla_pg, request):
    """pgbench at full speed against a followed primary; the lag sampled
    every 100 ms from the timeline detail (bytes and ms behind the primary)."""
    runtime = 10 if request.config.getoption("--perf-smoke") else 60
    pg = vanilla_pg.init(SETTINGS).start()
    ps = pageserver
    pg.pgbench_init(10)
    http, tenant, tl = follow_primary(ps, pg, [r"replication failed"])
    start_lsn = parse_lsn(pg.psql("SELECT pg_current_wal_insert_lsn()"))
    bench = subprocess.Popen(
        pg._cmd("pgbench", "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres", "-c", "4", "-j", "2",
                "-T", str(runtime), "postgres"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd="/",
    )
    lag_bytes, lag_ms = [], []
    t0 = time.monotonic()
    while bench.poll() is None:
        src = http.timeline_get(tenant, tl)["wal_source"]
        lag_bytes.append(src["lag_bytes"])
        lag_ms.append(src["lag_ms"])
        time.sleep(0.1)
    elapsed = time.monotonic() - t0
    out = bench.stdout.read()
    tps = next((line.split("=")[1].split()[0] for line in out.splitlines() if line.startswith("tps")), "?")
    end_lsn = parse_lsn(pg.psql("SELECT pg_current_wal_insert_lsn()"))
    wal_mib = (end_lsn - start_lsn) / 2**20
    result = {
        "runtime_s": runtime,
        "pgbench_tps": tps,
        "wal_mib_s": round(wal_mib / elapsed, 1),
        "lag_bytes_p50": percentile(lag_bytes, 0.5),
        "lag_bytes_p99": percentile(lag_bytes, 0.99),
        "lag_ms_p50": percentile(lag_ms, 0.5),
        "lag_ms_p99": percentile(lag_ms, 0.99),
        "samples": len(lag_ms),
        "backpressure_waits": http.metrics().value_or("pageserver_ingest_backpressure_waits_total", 0.0),
        "worst_samples_ms": sorted(lag_ms)[-5:],
    }
    (TEST_OUTPUT / "perf").mkdir(parents=True, exist_ok=True)
    with open(TEST_OUTPUT / "perf" / "wal_ingest.jsonl", "a") as f:
        f.write(json.dumps(result) + "\n")
    request.config.perf_summaries.append(("WAL ingest under pgbench", json.dumps(result)))


def run_pgbench(pg, seconds: int) -> None:
    pg.run("pgbench", "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres", "-c", "4", "-j", "2",
           "-T", str(seconds), "postgres")


def test_pgbench_wal_catch_up(pageserver, vanilla_pg, test_output_dir, request):
    """Catch-up of pgbench WAL (>= 1 GiB; 64 MiB in the smoke run) written
    while the daemon was stopped, side by side with pg_receivewal receiving
    the same range from a slot created at the same moment."""
    target = (64 if request.config.getoption("--perf-smoke") else 1024) * 2**20
    pg = vanilla_pg.init(SETTINGS).start()
    ps = pageserver
    pg.pgbench_init(10)
    http, tenant, tl = follow_primary(ps, pg, [r"replication failed"])
    here = parse_lsn(pg.psql("SELECT pg_current_wal_insert_lsn()"))
    while parse_lsn(http.timeline_get(tenant, tl)["last_record_lsn"]) < here:
        time.sleep(0.05)
    ours_start = parse_lsn(http.timeline_get(tenant, tl)["last_record_lsn"])  # idle primary: ~where it stops
    ps.stop()
    pg.psql("SELECT pg_create_physical_replication_slot('bench_receivewal', true)")
    start_lsn = pg.psql("SELECT restart_lsn FROM pg_replication_slots WHERE slot_name = 'bench_receivewal'")
    while parse_lsn(pg.psql("SELECT pg_current_wal_insert_lsn()")) - parse_lsn(start_lsn) < target:
        run_pgbench(pg, 5)
    end_lsn = pg.psql("SELECT pg_current_wal_insert_lsn()")
    pg.psql("SELECT pg_logical_emit_message(true, 'end', 'x')")  # a record past the end (see above)
    floor_mib = (parse_lsn(end_lsn) - parse_lsn(start_lsn)) / 2**20
    ours_mib = (parse_lsn(end_lsn) - ours_start) / 2**20

    floor_s = receivewal_seconds(pg, "bench_receivewal", end_lsn, test_output_dir / "receivewal")
    shutil.rmtree(test_output_dir / "receivewal")
    t0 = time.monotonic()
    ps.start()
    while parse_lsn(http.timeline_get(tenant, tl)["last_record_lsn"]) < parse_lsn(end_lsn):
        time.sleep(0.01)
    ours_s = time.monotonic() - t0
    info = http.timeline_get(tenant, tl)
    result = {
        "wal_mib": round(ours_mib, 1),
        "pg_receivewal_mib_s": round(floor_mib / floor_s, 1),
        "pageserver_mib_s": round(ours_mib / ours_s, 1),
        "ratio": round((ours_mib / ours_s) / (floor_mib / floor_s), 2),
        "l0_layers": info["l0_layers"],
        "layer_bytes": info["l0_bytes"] + info["in_memory_bytes"],
    }
    result["records_per_s"] = round(http.metrics().value("pageserver_wal_ingest_records_total") / ours_s)  # counters restart with the daemon
    record(request, "WAL catch-up, pgbench", result)
    pg.psql("SELECT pg_drop_replication_slot('bench_receivewal')")


def record(request, title: str, result: dict) -> None:
    out = TEST_OUTPUT / "perf"
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "wal_ingest.jsonl", "a") as f:
        f.write(json.dumps(result) + "\n")
    request.config.perf_summaries.append((title, json.dumps(result)))


def test_reads_during_bulk_load(pageserver, vanilla_pg, request):
    """While the primary runs one big `CREATE TABLE ... AS SELECT
    generate_series(1, N)`, a reader asks every 100 ms for a page at the
    primary's latest flushed LSN (as a compute does after its own writes):
    each read waits until ingest reaches that LSN. Latency p50/p99 and the
    slowest reads; no read may time out."""
    rows = 1_000_000 if request.config.getoption("--perf-smoke") else int(os.environ.get("BULK_ROWS", "20000000"))
    pg = vanilla_pg.init(SETTINGS).start()
    ps = pageserver
    http, tenant, tl = follow_primary(ps, pg, [r"replication failed"])
    pg.psql("CREATE TABLE probe AS SELECT generate_series(1, 100) g")
    node = int(pg.psql("SELECT pg_relation_filenode('probe')"))
    db = int(pg.psql("SELECT oid FROM pg_database WHERE datname = 'postgres'"))
    probe = RelTag(1663, db, node, 0)
    start_lsn = parse_lsn(pg.psql("SELECT pg_current_wal_insert_lsn()"))
    load = subprocess.Popen(
        pg._cmd("psql", "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres", "-Atc",
                f"CREATE TABLE big AS SELECT generate_series(1, {rows}) g", "postgres"),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd="/",
    )
    latencies_ms, errors, lags = [], [], []
    t0 = time.monotonic()
    with ps.pagestream(tenant, tl) as c:
        while load.poll() is None:
            lsn = parse_lsn(pg.psql("SELECT pg_current_wal_flush_lsn()"))
            sent = time.monotonic()
            resp = c.get_page(probe, 0, lsn=lsn)
            latencies_ms.append((time.monotonic() - sent) * 1000)
            if isinstance(resp, ErrorResponse):
                errors.append(resp.message)
            lags.append(http.timeline_get(tenant, tl)["wal_source"]["lag_bytes"])
            time.sleep(0.1)
    elapsed = time.monotonic() - t0
    assert load.returncode == 0, load.stderr.read()
    end_lsn = parse_lsn(pg.psql("SELECT pg_current_wal_insert_lsn()"))
    assert not errors, f"{len(errors)} of {len(latencies_ms)} reads failed, first: {errors[0]}"
    result = {
        "rows": rows,
        "wal_mib": round((end_lsn - start_lsn) / 2**20, 1),
        "primary_wal_mib_s": round((end_lsn - start_lsn) / 2**20 / elapsed, 1),
        "reads": len(latencies_ms),
        "read_ms_p50": round(percentile(latencies_ms, 0.5), 2),
        "read_ms_p99": round(percentile(latencies_ms, 0.99), 2),
        "read_ms_max": round(max(latencies_ms, default=0), 2),
        "lag_bytes_p99": percentile(lags, 0.99),
    }
    record(request, "Reads during a bulk load", result)
