"""Warm GetPage against its floor, in the same run.

The floor is the same daemon restarted with `page_service_constant_pages`:
the same connection threads, pagestream codec, batching and metrics, every
GetPage answered with a constant page and no storage read. pagebench (one
client, queue depth 1 and 32) runs against the floor and the daemon in
alternating cells on a pgbench scale-10 import. Per cell: getpage/s,
latency (mean, p50, p99) and CPU per getpage (the daemon's own CPU seconds
over its getpage count).

What is reported, as figures of one run (so they hold on any machine):
- depth 1: the daemon's mean latency minus the floor's (the overhead, µs)
  and their ratio;
- depth 32: the floor's getpage/s over the daemon's.

Both ratios are printed next to the reference committed in
docs/benchmarks.md (the `getpage-floor-reference` line), naming a shortfall
of more than 10%. Nothing fails on a ratio: a shared machine is too noisy
for that. `PAGESERVER_BASELINE_BIN` adds an older build (its own import,
same cells) for A/B comparisons by hand.
"""

from __future__ import annotations

import json
import os
import platform
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

from fixtures.compare import import_backup
from fixtures.pagebench import run_pagebench
from fixtures.pagestream import GetPageResponse, RelTag
from fixtures.pageserver import TEST_OUTPUT, pageserver_testing_bin

pytestmark = pytest.mark.perf

CONSTANT_PAGE = bytes([0x5A]) * 8192  # page_service/execute.rs
QUEUE_DEPTHS = [1, 32]
BENCHMARKS_MD = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"
REFERENCE_RE = re.compile(r"<!-- getpage-floor-reference: (\{.*?\}) -->")
SHORTFALL = 1.10


@dataclass
class Cell:
    source: str
    queue_depth: int
    round: int
    rps: float
    latency_mean_us: float
    latency_p50_us: float
    latency_p99_us: float
    cpu_per_getpage_us: float
    errors: int


def measure(ps, source: str, qd: int, rnd: int, runtime: str, log_path: Path) -> Cell:
    run_pagebench(ps, runtime="1s", queue_depth=qd, log_path=log_path)  # warm caches
    http = ps.http_client()
    m0 = http.metrics()
    res = run_pagebench(ps, runtime=runtime, queue_depth=qd, log_path=log_path)
    m1 = http.metrics()

    getpages = m1.delta_since(m0, "pageserver_smgr_query_seconds_count", smgr_query_type="get_page_at_lsn")
    cpu = m1.delta_since(m0, "libmetrics_process_cpu_seconds_highres")
    return Cell(
        source=source,
        queue_depth=qd,
        round=rnd,
        rps=res.rps,
        latency_mean_us=res.latency_us("mean"),
        latency_p50_us=res.latency_us("p50"),
        latency_p99_us=res.latency_us("p99"),
        cpu_per_getpage_us=cpu / getpages * 1e6 if getpages else 0.0,
        errors=res.error_count,
    )


def median(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


def summarize(cells: list[Cell]) -> dict[str, dict[str, float]]:
    """Per (source, depth): the median of each figure over the rounds."""
    out: dict[str, dict[str, float]] = {}
    for key in sorted({(c.source, c.queue_depth) for c in cells}):
        mine = [c for c in cells if (c.source, c.queue_depth) == key]
        out[f"{key[0]}@{key[1]}"] = {
            f: median([getattr(c, f) for c in mine])
            for f in ("rps", "latency_mean_us", "latency_p50_us", "latency_p99_us", "cpu_per_getpage_us")
        }
    return out


def ratios(s: dict[str, dict[str, float]], source: str) -> dict[str, float]:
    d1, f1 = s[f"{source}@1"], s["floor@1"]
    d32, f32 = s[f"{source}@32"], s["floor@32"]
    return {
        "qd1_overhead_us": d1["latency_mean_us"] - f1["latency_mean_us"],
        "qd1_latency_ratio": d1["latency_mean_us"] / f1["latency_mean_us"],
        "qd32_floor_rps_ratio": f32["rps"] / d32["rps"],
    }


def reference() -> dict[str, float] | None:
    m = REFERENCE_RE.search(BENCHMARKS_MD.read_text())
    return json.loads(m.group(1)) if m else None


def report(cells: list[Cell], s: dict, r: dict[str, dict[str, float]], ref: dict | None, runtime: str) -> str:
    lines = [
        f"pagebench get-page-latest-lsn, 1 client, {runtime} per cell, pgbench scale 10 imported; "
        f"{os.cpu_count()} CPUs, {platform.machine()}; medians of {max(c.round for c in cells) + 1} round(s)",
        "",
        "| source | depth | getpage/s | mean (µs) | p50 (µs) | p99 (µs) | CPU/getpage (µs) |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, v in s.items():
        src, qd = key.split("@")
        lines.append(
            f"| {src} | {qd} | {v['rps']:,.0f} | {v['latency_mean_us']:.1f} | {v['latency_p50_us']:.0f} | "
            f"{v['latency_p99_us']:.0f} | {v['cpu_per_getpage_us']:.1f} |"
        )
    lines += ["", "| source | depth-1 overhead over the floor (µs) | depth-1 latency / floor | depth-32 floor getpage/s / source |",
              "|---|---|---|---|"]  # fmt: skip
    for src, v in r.items():
        lines.append(f"| {src} | {v['qd1_overhead_us']:.1f} | {v['qd1_latency_ratio']:.2f} | {v['qd32_floor_rps_ratio']:.2f} |")
    lines.append("")
    lines += compare_with_reference(r["daemon"], ref)
    return "\n".join(lines)


def compare_with_reference(mine: dict[str, float], ref: dict | None) -> list[str]:
    if ref is None:
        return ["No reference line in docs/benchmarks.md (`getpage-floor-reference`)."]
    out = []
    for key in ("qd1_latency_ratio", "qd32_floor_rps_ratio"):
        got, want = mine[key], ref[key]
        verdict = f"SHORTFALL: {got / want - 1:+.0%} over the reference" if got > want * SHORTFALL else "within 10%"
        out.append(f"- {key}: {got:.2f} (reference {want:.2f}): {verdict}")
    return out


def pg_class_block_0(ps, tl) -> bytes:
    """Block 0 of pg_class as served (the floor must answer its constant
    page, the daemon the stored one)."""
    rel = RelTag(1663, 5, 1259, 0)  # pg_class of database `postgres`: block 0 exists
    with ps.pagestream(tl.tenant_id, tl.timeline_id) as client:
        resp = client.get_page(rel, 0)
    assert isinstance(resp, GetPageResponse), resp
    return resp.page


def test_getpage_floor(pageserver_factory, pgbench_backup, request):
    binary = pageserver_testing_bin()
    if binary is None:
        pytest.skip("the floor needs a daemon built with --features testing (PAGESERVER_TESTING_BIN)")
    smoke = request.config.getoption("--perf-smoke")
    runtime = "2s" if smoke else request.config.getoption("--perf-runtime")
    rounds = 1 if smoke else 3
    log_path = TEST_OUTPUT / "perf" / "getpage_floor.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text("")

    ps = pageserver_factory.create(binary=binary).start()
    tl = import_backup(ps, pgbench_backup)
    daemons = {"daemon": (ps, {}), "floor": (ps, {"page_service_constant_pages": True})}
    if baseline := os.environ.get("PAGESERVER_BASELINE_BIN"):
        base = pageserver_factory.create("baseline", binary=Path(baseline)).start()
        import_backup(base, pgbench_backup)
        daemons["baseline"] = (base, {})
    ps.stop()

    pages = {}
    cells: list[Cell] = []
    for rnd in range(rounds):
        order = list(daemons) if rnd % 2 == 0 else list(reversed(daemons))
        for source in order:
            d, overrides = daemons[source]
            for other, _ in daemons.values():
                if other is not d and other.is_running():
                    other.stop()
            if d.is_running():
                d.stop()
            d.start(extra_overrides=overrides)
            if d is ps:
                pages[source] = pg_class_block_0(ps, tl)
            for qd in QUEUE_DEPTHS:
                cells.append(measure(d, source, qd, rnd, runtime, log_path))
    for d, _ in daemons.values():
        if d.is_running():
            d.stop()

    assert pages["floor"] == CONSTANT_PAGE, "the floor must answer the constant page"
    assert pages["daemon"] != CONSTANT_PAGE, "the daemon must answer the stored page"
    assert all(c.errors == 0 for c in cells), [c for c in cells if c.errors]

    s = summarize(cells)
    r = {src: ratios(s, src) for src in daemons if src != "floor"}
    text = report(cells, s, r, reference(), runtime)
    out = TEST_OUTPUT / "perf" / "getpage_floor.json"
    out.write_text(json.dumps({"runtime_per_cell": runtime, "cells": [asdict(c) for c in cells],
                               "summary": s, "ratios": r}, indent=2))  # fmt: skip
    (TEST_OUTPUT / "perf" / "getpage_floor.md").write_text(text + "\n")
    request.config.perf_summaries.append(("GetPage against the floor", text))
