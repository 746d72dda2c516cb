"""Cold reads, per IO engine and with or without direct IO, against the
physical limit of the disk.

pgbench scale 100 (scale 10 in the smoke run) imported once; for each
engine, buffered and with `direct_io`, and with one or two GetPage batches
in flight per connection, the daemon restarts on it, and for
queue depth 1 and 32 the page cache is dropped (`echo 1 >
/proc/sys/vm/drop_caches`, as root) before a short pagebench run of random
GetPage@latest. Beside it, in the same run, `fio` random 8 KiB O_DIRECT
reads (io_uring) of the largest layer file at the same depths: the device's
IOPS. At depth 32 fio also runs in batches (32 reads submitted together,
the next 32 only when all are done: `--iodepth_batch_submit=32
--iodepth_batch_complete_min=32`), the device's speed for a reader that
waits for a whole batch, as a client waiting for in-order answers partly
does. Every run also records the device's reads per second, mean read
latency and mean queue depth (from /proc/diskstats). A buffered daemon
warms the page cache as it runs, so runs are short; with direct IO every
read goes to the device.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from fixtures.compare import import_backup
from fixtures.pagebench import run_pagebench
from fixtures.pageserver import TEST_OUTPUT

pytestmark = pytest.mark.perf

# (io_engine, direct_io, max_batches_in_flight of the pipelined handler)
# (2 is the default.)
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


def fio_iops(path: Path, depth: int, runtime_s: int, batched: bool = False, jobs: int = 1) -> float:
    cmd = [
        "fio", "--name=cold", f"--filename={path}", "--readonly", "--rw=randread", "--bs=8k",
        "--direct=1", "--ioengine=io_uring", f"--iodepth={depth}", f"--runtime={runtime_s}",
        "--time_based", "--output-format=json", f"--numjobs={jobs}", "--group_reporting",
    ]  # fmt: skip
    if batched:
        cmd += [f"--iodepth_batch_submit={depth}", f"--iodepth_batch_complete_min={depth}"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=runtime_s + 60).stdout
    return json.loads(out)["jobs"][0]["read"]["iops"]


class DiskStats:
    """Reads completed and milliseconds spent reading on the block device
    holding `path` (/proc/diskstats, fields 4 and 7), over a run. On a file
    system without one (overlay, tmpfs) there are no figures."""

    def __init__(self, path: Path):
        dev = path.stat().st_dev
        self.name = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}").resolve().name

    def sample(self) -> tuple[int, int, float] | None:
        for line in Path("/proc/diskstats").read_text().splitlines():
            f = line.split()
            if f[2] == self.name:
                return int(f[3]), int(f[6]), time.monotonic()
        return None

    def during(self, run):
        """`run()`'s result and the device's figures while it ran."""
        before = self.sample()
        res = run()
        after = self.sample()
        if before is None or after is None:
            return res, {}
        (r0, ms0, t0), (r1, ms1, t1) = before, after
        reads, secs = r1 - r0, t1 - t0
        return res, {"disk_reads_per_s": round(reads / secs), "disk_await_us": round(1000 * (ms1 - ms0) / max(reads, 1)),
                     "disk_queue": round((ms1 - ms0) / 1000 / secs, 1)}  # fmt: skip


def test_cold_reads_per_engine(pageserver, pgbench_s100_backup_or_small, request):
    if os.geteuid() != 0:
        pytest.skip("dropping the page cache needs root")
    runtime_s = 2 if request.config.getoption("--perf-smoke") else 3
    ps = pageserver
    import_backup(ps, pgbench_s100_backup_or_small)
    layer = largest_layer(ps.workdir)
    disk = DiskStats(layer)
    # The disk's speed drifts (a shared virtual disk): fio runs before and
    # after the daemon's runs, and the reference is the mean of the two.
    fio_modes = [(d, False) for d in DEPTHS] + [(32, True)]
    fio_runs = {m: [] for m in fio_modes}

    def run_fio():
        for depth, batched in fio_modes:
            drop_caches()
            fio_runs[(depth, batched)].append(disk.during(lambda: fio_iops(layer, depth, runtime_s, batched)))

    run_fio()
    rows = []
    for engine, direct, in_flight in CONFIGS:
        ps.stop()
        pipelining = {"mode": "pipelined", "max_batch_size": 32, "execution": "concurrent-futures",
                      "max_batches_in_flight": in_flight}  # fmt: skip
        ps.start(extra_overrides={"io_engine": engine, "direct_io": direct, "page_service_pipelining": pipelining})
        for depth in DEPTHS:
            drop_caches()
            res, dev = disk.during(lambda: run_pagebench(ps, runtime=f"{runtime_s}s", queue_depth=depth))
            assert res.error_count == 0, res.stderr[-2000:]
            name = f"{engine} direct" if direct else f"{engine} buffered"
            rows.append({"engine": name, "batches_in_flight": in_flight, "queue_depth": depth, "getpage_per_s": round(res.rps),
                         "p50_us": res.latency_us("p50"), "p99_us": res.latency_us("p99"), **dev})
    run_fio()
    for (depth, batched), ((before, dev), (after, _)) in fio_runs.items():
        name = "fio O_DIRECT in batches" if batched else "fio O_DIRECT"
        rows.append({"engine": name, "queue_depth": depth, "getpage_per_s": round((before + after) / 2),
                     "fio_before": round(before), "fio_after": round(after), **dev})  # fmt: skip
    fio = {r["queue_depth"]: r["getpage_per_s"] for r in rows if r["engine"] == "fio O_DIRECT"}
    fio_batched = next(r["getpage_per_s"] for r in rows if r["engine"] == "fio O_DIRECT in batches")
    for r in rows:
        r["of_fio"] = round(r["getpage_per_s"] / fio[r["queue_depth"]], 2)
        if r["queue_depth"] == 32:
            r["of_fio_in_batches"] = round(r["getpage_per_s"] / fio_batched, 2)
    out = TEST_OUTPUT / "perf"
    out.mkdir(parents=True, exist_ok=True)
    (out / "cold_reads.json").write_text(json.dumps({"layer_bytes": layer.stat().st_size, "rows": rows}, indent=2))
    request.config.perf_summaries.append(("cold reads per engine", "\n".join(json.dumps(r) for r in rows)))


def test_cold_reads_connections_against_fio_jobs(pageserver, pgbench_s100_backup_or_small, request):
    """Cold random GetPage@latest with io-uring and direct IO from
    `COLD_READ_CONNECTIONS` connections (default 8), each at queue depth 1,
    against fio with as many jobs at depth 1 on the largest layer file, in
    alternating rounds (`COLD_READ_ROUNDS`, default 3) of the same run: the
    engine's scaling across connections (one ring per engine)."""
    if os.geteuid() != 0:
        pytest.skip("dropping the page cache needs root")
    connections = int(os.environ.get("COLD_READ_CONNECTIONS", "8"))
    rounds = int(os.environ.get("COLD_READ_ROUNDS", "3"))
    runtime_s = 2 if request.config.getoption("--perf-smoke") else 3
    ps = pageserver
    import_backup(ps, pgbench_s100_backup_or_small)
    layer = largest_layer(ps.workdir)
    disk = DiskStats(layer)
    ps.stop()
    ps.start(extra_overrides={"io_engine": "io-uring", "direct_io": True})
    rows = []
    for r in range(rounds):
        drop_caches()
        fio, fio_dev = disk.during(lambda: fio_iops(layer, 1, runtime_s, jobs=connections))
        drop_caches()
        res, dev = disk.during(
            lambda: run_pagebench(ps, runtime=f"{runtime_s}s", queue_depth=1, num_clients=connections)
        )
        assert res.error_count == 0, res.stderr[-2000:]
        rows.append({"round": r, "connections": connections, "getpage_per_s": round(res.rps), "fio_iops": round(fio),
                     "of_fio": round(res.rps / fio, 2), "p99_us": res.latency_us("p99"), **dev,
                     "fio_disk_await_us": fio_dev.get("disk_await_us")})  # fmt: skip
    out = TEST_OUTPUT / "perf"
    out.mkdir(parents=True, exist_ok=True)
    (out / "cold_reads_connections.json").write_text(json.dumps(rows, indent=2))
    request.config.perf_summaries.append(("cold reads, connections against fio jobs", "\n".join(json.dumps(r) for r in rows)))


@pytest.fixture
def pgbench_s100_backup_or_small(request):
    """Scale 100, or scale 10 in the smoke run (building scale 100 takes minutes)."""
    name = "pgbench_backup" if request.config.getoption("--perf-smoke") else "pgbench_s100_backup"
    return request.getfixturevalue(name)
