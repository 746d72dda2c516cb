"""Cold reads, per IO engine and with or without direct IO, against the
physical limit of the disk.

pgbench scale 100 (scale 10 in the smoke run) imported once; for each
engine, buffered and with `direct_io`, and with one or two GetPage batches
in flight per connection, the daemon restarts on it, and for
queue depth 1 and 32 the page cache is dropped (`echo 1 >
/proc/sys/vm/drop_caches`, as root) before a short pagebench run of random
GetPage@latest. Beside it, in the same run, `fio` random 8 KiB O_DIRECT
reads (io_uring) of the largest layer file at the same depths: the device's
IOPS. A buffered daemon warms the page cache as it runs, so runs are short;
with direct IO every read goes to the device.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from fixtures.compare import import_backup
from fixtures.pagebench import run_pagebench
from fixtures.pageserver import TEST_OUTPUT

pytestmark = pytest.mark.perf

# (io_engine, direct_io, max_batches_in_flight of the pipelined handler)
# (1 is the default: one batch at a time.)
CONFIGS = [
    ("std-fs", False, 1), ("io-uring", False, 1), ("std-fs", True, 1), ("io-uring", True, 1),
    ("std-fs", True, 2), ("io-uring", True, 2),
]  # fmt: skip
DEPTHS = [1, 32]


def drop_caches() -> None:
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("1\n")


def largest_layer(workdir: Path) -> Path:
    files = [p for p in workdir.rglob("*__*") if p.is_file() and "___" not in p.name]
    return max(files, key=lambda p: p.stat().st_size)


def fio_iops(path: Path, depth: int, runtime_s: int) -> float:
    cmd = [
        "fio", "--name=cold", f"--filename={path}", "--readonly", "--rw=randread", "--bs=8k",
        "--direct=1", "--ioengine=io_uring", f"--iodepth={depth}", f"--runtime={runtime_s}",
        "--time_based", "--output-format=json",
    ]  # fmt: skip
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=runtime_s + 60).stdout
    return json.loads(out)["jobs"][0]["read"]["iops"]


def test_cold_reads_per_engine(pageserver, pgbench_s100_backup_or_small, request):
    if os.geteuid() != 0:
        pytest.skip("dropping the page cache needs root")
    runtime_s = 2 if request.config.getoption("--perf-smoke") else 3
    ps = pageserver
    import_backup(ps, pgbench_s100_backup_or_small)
    layer = largest_layer(ps.workdir)
    # The disk's speed drifts (a shared virtual disk): fio runs before and
    # after the daemon's runs, and the reference is the mean of the two.
    fio_runs = {d: [] for d in DEPTHS}

    def run_fio():
        for depth in DEPTHS:
            drop_caches()
            fio_runs[depth].append(fio_iops(layer, depth, runtime_s))

    run_fio()
    rows = []
    for engine, direct, in_flight in CONFIGS:
        ps.stop()
        pipelining = {"mode": "pipelined", "max_batch_size": 32, "execution": "concurrent-futures",
                      "max_batches_in_flight": in_flight}  # fmt: skip
        ps.start(extra_overrides={"io_engine": engine, "direct_io": direct, "page_service_pipelining": pipelining})
        for depth in DEPTHS:
            drop_caches()
            res = run_pagebench(ps, runtime=f"{runtime_s}s", queue_depth=depth)
            assert res.error_count == 0, res.stderr[-2000:]
            name = f"{engine} direct" if direct else f"{engine} buffered"
            rows.append({"engine": name, "batches_in_flight": in_flight, "queue_depth": depth, "getpage_per_s": round(res.rps),
                         "p50_us": res.latency_us("p50"), "p99_us": res.latency_us("p99")})
    run_fio()
    for depth in DEPTHS:
        before, after = fio_runs[depth]
        rows.append({"engine": "fio O_DIRECT", "queue_depth": depth, "getpage_per_s": round((before + after) / 2),
                     "fio_before": round(before), "fio_after": round(after)})  # fmt: skip
    fio = {r["queue_depth"]: r["getpage_per_s"] for r in rows if r["engine"] == "fio O_DIRECT"}
    for r in rows:
        r["of_fio"] = round(r["getpage_per_s"] / fio[r["queue_depth"]], 2)
    out = TEST_OUTPUT / "perf"
    out.mkdir(parents=True, exist_ok=True)
    (out / "cold_reads.json").write_text(json.dumps({"layer_bytes": layer.stat().st_size, "rows": rows}, indent=2))
    request.config.perf_summaries.append(("cold reads per engine", "\n".join(json.dumps(r) for r in rows)))


@pytest.fixture
def pgbench_s100_backup_or_small(request):
    """Scale 100, or scale 10 in the smoke run (building scale 100 takes minutes)."""
    name = "pgbench_backup" if request.config.getoption("--perf-smoke") else "pgbench_s100_backup"
    return request.getfixturevalue(name)
