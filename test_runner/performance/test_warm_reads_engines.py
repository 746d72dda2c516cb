"""Warm reads, io-uring against std-fs, in one daemon.

pgbench scale 10 imported (all in the page cache); the daemon switches its
IO engine at run time (`PUT /v1/io_engine`), so both engines serve the same
process, the same open layer files and the same cached pages. Rounds
alternate the engine order (A B, B A, ...) to cancel drift; each run is
pagebench random GetPage@latest at queue depth 1 and 32 (one client,
pipelined handler) with CPU per getpage from the daemon's own metrics.
The ratio per round is io-uring / std-fs getpage/s; the summary is their
geometric mean over the rounds.
"""

from __future__ import annotations

import json
import math

import pytest

from fixtures.compare import import_backup
from fixtures.pagebench import run_pagebench
from fixtures.pageserver import TEST_OUTPUT

pytestmark = pytest.mark.perf

ENGINES = ["std-fs", "io-uring"]
DEPTHS = [1, 32]


def measure(ps, engine: str, depth: int, runtime: str) -> dict:
    http = ps.http_client()
    http.set_io_engine(engine)
    m0 = http.metrics()
    res = run_pagebench(ps, runtime=runtime, queue_depth=depth)
    m1 = http.metrics()
    assert res.error_count == 0, res.stderr[-2000:]
    getpages = m1.value_or("pageserver_smgr_query_seconds_count", 0.0, smgr_query_type="get_page_at_lsn") - m0.value_or(
        "pageserver_smgr_query_seconds_count", 0.0, smgr_query_type="get_page_at_lsn"
    )
    cpu = m1.value_or("libmetrics_process_cpu_seconds_highres", 0.0) - m0.value_or("libmetrics_process_cpu_seconds_highres", 0.0)
    return {"engine": engine, "queue_depth": depth, "rps": res.rps, "cpu_per_getpage_us": cpu / getpages * 1e6}


def test_warm_reads_io_uring_vs_std_fs(pageserver, pgbench_backup, request):
    smoke = request.config.getoption("--perf-smoke")
    runtime, rounds = ("1s", 2) if smoke else ("3s", 12)
    ps = pageserver
    import_backup(ps, pgbench_backup)
    run_pagebench(ps, runtime="2s", queue_depth=32)  # warm the page cache
    rows = []
    for r in range(rounds):
        order = ENGINES if r % 2 == 0 else ENGINES[::-1]
        for depth in DEPTHS:
            for engine in order:
                rows.append({"round": r, **measure(ps, engine, depth, runtime)})
    summary = []
    for depth in DEPTHS:
        ratios, cpu_ratios = [], []
        for r in range(rounds):
            cell = {x["engine"]: x for x in rows if x["round"] == r and x["queue_depth"] == depth}
            ratios.append(cell["io-uring"]["rps"] / cell["std-fs"]["rps"])
            cpu_ratios.append(cell["io-uring"]["cpu_per_getpage_us"] / cell["std-fs"]["cpu_per_getpage_us"])
        gmean = math.exp(sum(map(math.log, ratios)) / len(ratios))
        cpu_gmean = math.exp(sum(map(math.log, cpu_ratios)) / len(cpu_ratios))
        summary.append({"queue_depth": depth, "io_uring_over_std_fs_rps": round(gmean, 3),
                        "rounds": [round(x, 3) for x in ratios], "cpu_per_getpage_ratio": round(cpu_gmean, 3)})
    out = TEST_OUTPUT / "perf"
    out.mkdir(parents=True, exist_ok=True)
    (out / "warm_reads_engines.json").write_text(json.dumps({"rows": rows, "summary": summary}, indent=2))
    request.config.perf_summaries.append(("warm reads io-uring / std-fs", "\n".join(json.dumps(s) for s in summary)))
