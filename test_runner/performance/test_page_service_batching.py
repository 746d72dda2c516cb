"""The equivalent of Neon's test_page_service_batching, driven by pagebench.

A pgbench scale-10 database is imported once; for every handler config
(serial; pipelined max_batch_size 1..32 x concurrent-futures, tasks, one
batch in flight, the default, as Neon's; and 32 pages as two batches in
flight) and
queue depth (1, 32) the daemon is restarted with that config and pagebench
runs one client for --perf-runtime. Per cell we record, from the daemon's own
metrics (deltas around the run): getpages, vectored gets, the batching factor
(getpages / vectored gets), the mean batch size (batch histogram sum/count)
and CPU per getpage (delta of libmetrics_process_cpu_seconds_highres /
getpages); and from pagebench: throughput and latency (mean, p50, p99, p99.9).

Results go to test_output/perf/page_service_batching.json and a markdown
summary printed at the end of the run. `--perf-smoke` runs only serial,
pipelined(32, concurrent-futures) with one and two batches in flight, at
both depths, 2 s each.
"""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import asdict, dataclass

import pytest

from fixtures.compare import import_backup
from fixtures.pagebench import run_pagebench
from fixtures.pageserver import TEST_OUTPUT

pytestmark = pytest.mark.perf

EXECUTIONS = ["concurrent-futures", "tasks"]
BATCH_SIZES = [1, 2, 4, 8, 16, 32]
QUEUE_DEPTHS = [1, 32]


def all_configs() -> list[tuple[str, dict]]:
    configs = [("serial", {"mode": "serial"})]
    for ex in EXECUTIONS:
        for n in BATCH_SIZES:
            configs.append((f"pipelined-{ex}-{n}", {"mode": "pipelined", "max_batch_size": n, "execution": ex,
                                                     "max_batches_in_flight": 1}))  # fmt: skip
    configs.append(("pipelined-concurrent-futures-32-2-in-flight",
                    {"mode": "pipelined", "max_batch_size": 32, "execution": "concurrent-futures",
                     "max_batches_in_flight": 2}))  # fmt: skip
    return configs


SMOKE_CONFIGS = {"serial", "pipelined-concurrent-futures-32", "pipelined-concurrent-futures-32-2-in-flight"}


@dataclass
class Cell:
    config: str
    queue_depth: int
    requests: int
    errors: int
    rps: float
    latency_mean_us: float
    latency_p50_us: float
    latency_p99_us: float
    latency_p99_9_us: float
    getpages: float
    vectored_gets: float
    batching_factor: float
    mean_batch_size: float
    cpu_seconds: float
    cpu_per_getpage_us: float


def measure_cell(ps, config_name: str, queue_depth: int, runtime: str, warmup: str | None, log_path) -> Cell:
    if warmup:
        run_pagebench(ps, runtime=warmup, queue_depth=queue_depth, log_path=log_path)
    http = ps.http_client()
    m0 = http.metrics()
    res = run_pagebench(ps, runtime=runtime, queue_depth=queue_depth, log_path=log_path)
    m1 = http.metrics()

    def delta(name, **labels):
        return m1.delta_since(m0, name, **labels)

    getpages = delta("pageserver_smgr_query_seconds_count", smgr_query_type="get_page_at_lsn")
    vectored = delta("pageserver_get_vectored_seconds_count", task_kind="PageRequestHandler")
    batches = delta("pageserver_page_service_batch_size_count")
    batched = delta("pageserver_page_service_batch_size_sum")
    cpu = delta("libmetrics_process_cpu_seconds_highres")
    return Cell(
        config=config_name,
        queue_depth=queue_depth,
        requests=res.request_count,
        errors=res.error_count,
        rps=res.rps,
        latency_mean_us=res.latency_us("mean"),
        latency_p50_us=res.latency_us("p50"),
        latency_p99_us=res.latency_us("p99"),
        latency_p99_9_us=res.latency_us("p99.9"),
        getpages=getpages,
        vectored_gets=vectored,
        batching_factor=getpages / vectored if vectored else 0.0,
        mean_batch_size=batched / batches if batches else 0.0,
        cpu_seconds=cpu,
        cpu_per_getpage_us=cpu / getpages * 1e6 if getpages else 0.0,
    )


def markdown(cells: list[Cell], runtime: str) -> str:
    lines = [
        f"pagebench get-page-latest-lsn, 1 client, {runtime} per cell, pgbench scale 10 imported; "
        f"{os.cpu_count()} CPUs, {platform.machine()}",
        "",
        "| config | queue depth | getpage/s | batching factor | mean batch | CPU/getpage (µs) | mean (µs) | p99 (µs) | p99.9 (µs) | errors |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        lines.append(
            f"| {c.config} | {c.queue_depth} | {c.rps:,.0f} | {c.batching_factor:.1f} | {c.mean_batch_size:.1f} | "
            f"{c.cpu_per_getpage_us:.1f} | {c.latency_mean_us:.0f} | {c.latency_p99_us:.0f} | {c.latency_p99_9_us:.0f} | {c.errors} |"
        )
    by = {(c.config, c.queue_depth): c for c in cells}
    serial1 = by.get(("serial", 1))
    if serial1:
        lines += ["", "Latency at queue depth 1 (unbatchable):", "", "| config | mean (µs) | p99 (µs) | p99.9 (µs) | mean vs serial |", "|---|---|---|---|---|"]
        for c in cells:
            if c.queue_depth == 1 and (c.config == "serial" or c.config.endswith("-32")):
                ratio = c.latency_mean_us / serial1.latency_mean_us if serial1.latency_mean_us else 0
                lines.append(f"| {c.config} | {c.latency_mean_us:.0f} | {c.latency_p99_us:.0f} | {c.latency_p99_9_us:.0f} | {ratio:.3f} |")
    return "\n".join(lines)


def evaluate_targets(cells: list[Cell]) -> list[tuple[str, bool, str]]:
    """The page-service performance targets (issue: page service, item 7)."""
    by = {(c.config, c.queue_depth): c for c in cells}
    out = []
    s1, p1 = by.get(("serial", 1)), by.get(("pipelined-concurrent-futures-32", 1))
    s32, p32 = by.get(("serial", 32)), by.get(("pipelined-concurrent-futures-32", 32))
    if s1 and p1:
        r = p1.latency_mean_us / s1.latency_mean_us
        out.append(("qd1: pipelined mean latency within 5% of serial", r <= 1.05, f"{p1.latency_mean_us:.0f} vs {s1.latency_mean_us:.0f} µs ({r:.3f}x)"))
        out.append(("qd1: mean latency <= 200 µs", p1.latency_mean_us <= 200, f"{p1.latency_mean_us:.0f} µs"))
    if p32:
        out.append(("qd32: batching factor >= 24", p32.batching_factor >= 24, f"{p32.batching_factor:.1f}"))
        out.append(("qd32: >= 46k getpage/s", p32.rps >= 46_000, f"{p32.rps:,.0f}/s"))
    if s32 and p32:
        out.append(("qd32: throughput >= 3x serial", p32.rps >= 3 * s32.rps, f"{p32.rps / s32.rps:.2f}x"))
        out.append(
            (
                "qd32: CPU per getpage <= 1/3 of serial",
                p32.cpu_per_getpage_us * 3 <= s32.cpu_per_getpage_us,
                f"{p32.cpu_per_getpage_us:.1f} vs {s32.cpu_per_getpage_us:.1f} µs",
            )
        )
    return out


def test_page_service_batching(pageserver_factory, pgbench_backup, request):
    smoke = request.config.getoption("--perf-smoke")
    runtime = "2s" if smoke else request.config.getoption("--perf-runtime")
    warmup = None if smoke else "1s"
    configs = [c for c in all_configs() if not smoke or c[0] in SMOKE_CONFIGS]

    ps = pageserver_factory.create()
    ps.start()
    import_backup(ps, pgbench_backup)
    log_path = TEST_OUTPUT / "perf" / "pagebench.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text("")

    cells: list[Cell] = []
    t0 = time.monotonic()
    for qd in QUEUE_DEPTHS:
        for name, cfg in configs:
            ps.stop()
            ps.start(extra_overrides={"page_service_pipelining": cfg})
            cells.append(measure_cell(ps, name, qd, runtime, warmup, log_path))
    ps.stop()

    summary = markdown(cells, runtime)
    targets = evaluate_targets(cells)
    summary += "\n\nTargets:\n" + "\n".join(f"- [{'x' if ok else ' '}] {what}: {got}" for what, ok, got in targets)
    out = TEST_OUTPUT / "perf" / "page_service_batching.json"
    out.write_text(
        json.dumps(
            {
                "runtime_per_cell": runtime,
                "smoke": smoke,
                "wall_seconds": time.monotonic() - t0,
                "cells": [asdict(c) for c in cells],
                "targets": [{"target": w, "met": ok, "measured": g} for w, ok, g in targets],
            },
            indent=2,
        )
    )
    (TEST_OUTPUT / "perf" / "page_service_batching.md").write_text(summary + "\n")
    request.config.perf_summaries.append(("page service batching", summary))

    # Sanity, always: no errors; batching happens when requests can batch.
    assert all(c.errors == 0 for c in cells), [c for c in cells if c.errors]
    assert all(c.getpages == c.requests for c in cells), "server getpage count differs from pagebench's"
    by = {(c.config, c.queue_depth): c for c in cells}
    assert by[("serial", 32)].batching_factor == pytest.approx(1.0)
    assert by[("pipelined-concurrent-futures-32", 32)].batching_factor > 2, "no batching at queue depth 32"
    if request.config.getoption("--perf-assert-targets"):
        missed = [f"{w}: {g}" for w, ok, g in targets if not ok]
        assert not missed, "targets missed:\n" + "\n".join(missed)
