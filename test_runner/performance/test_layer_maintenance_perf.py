"""Compaction, image layers and on-disk indexes, measured.

- Read amplification: pgbench scale 10 imported twice; one timeline then
  takes 200 flushes of random page updates over its keyspace (40 in the
  smoke run) with background compaction on. pagebench at queue depth 1 and
  32 over each, in the same run: the updated timeline against the freshly
  imported one (one layer), and layers visited per GetPage (p99, from
  `pageserver_layers_visited_per_read`).
- Memory: daemon RSS after importing and serving pgbench scale 10, and
  scale 100, each on a fresh daemon (full run only: scale 100 takes minutes).
- Compaction throughput: a forced compaction of one L0 of COMPACTION_PAGES
  random pages (every relation block of pgbench scale 10 once, in batches
  at successive LSNs, through the testing ingest route: an import writes
  its large files as image layers, not as an L0), MiB/s of L0 bytes,
  against `cp` + `sync` of the same file.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import time

import pytest

from fixtures.compare import import_backup
from fixtures.pagebench import run_pagebench
from fixtures.pageserver import TEST_OUTPUT
from fixtures.utils import fmt_lsn

pytestmark = pytest.mark.perf

PAGE = 8192


def lsn_int(s: str) -> int:
    hi, lo = s.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def rel_blocks(http, tenant: str, timeline: str) -> list[str]:
    """Every relation block key of the main forks (36 hex digits each)."""
    keys = []
    for start, end in http.keyspace(tenant, timeline)["keys"]:
        # field1 0 (relation), a relation (relnode != 0), fork 0, blocks
        # start..end (not the relation size key, block 0xFFFFFFFF).
        if start[:2] != "00" or start[:28] != end[:28] or start[26:28] != "00":
            continue
        if start[18:26] == "00000000":
            continue
        first, last = int(start[28:], 16), min(int(end[28:], 16), 0xFFFFFFFF)
        keys.extend(f"{start[:28]}{b:08X}" for b in range(first, last))
    return keys


def summary(request, title: str, rows: list[dict], name: str) -> None:
    out = TEST_OUTPUT / "perf"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(rows, indent=2))
    request.config.perf_summaries.append((title, "\n".join(json.dumps(r) for r in rows)))


def histogram_p99(metrics_text: str, before: dict[float, float] | None = None) -> tuple[float, dict[float, float]]:
    """p99 bucket bound of `pageserver_layers_visited_per_read`, counting
    only observations since `before` (its cumulative buckets)."""
    buckets: dict[float, float] = {}
    for line in metrics_text.splitlines():
        if line.startswith("pageserver_layers_visited_per_read_bucket"):
            le = line.split('le="')[1].split('"')[0]
            buckets[float("inf") if le == "+Inf" else float(le)] = float(line.rsplit(" ", 1)[1])
    if before:
        buckets = {k: v - before.get(k, 0.0) for k, v in buckets.items()}
    total = buckets.get(float("inf"), 0.0)
    p99 = next((le for le in sorted(buckets) if total and buckets[le] >= 0.99 * total), float("nan"))
    return p99, buckets


def test_read_amplification(pageserver_factory, testing_pageserver_bin, pgbench_backup, request):
    smoke = request.config.getoption("--perf-smoke")
    flushes, runtime = (40, "2s") if smoke else (200, "5s")
    ps = pageserver_factory.create(binary=testing_pageserver_bin, overrides={"compaction_period": "1 s"})
    ps.start()
    http = ps.http_client()
    fresh = import_backup(ps, pgbench_backup)
    updated = import_backup(ps, pgbench_backup)
    t, tl = updated.tenant_id, updated.timeline_id
    keys = rel_blocks(http, t, tl)
    rng = random.Random(1)
    lsn = lsn_int(http.timeline_get(t, tl)["last_record_lsn"])
    started = time.monotonic()
    for _ in range(flushes):
        lsn += 0x1000
        images = {k: rng.randbytes(PAGE) for k in rng.sample(keys, 64)}
        http.testing_ingest(t, tl, fmt_lsn(lsn), images)
        http.timeline_checkpoint(t, tl)
    ingest_s = time.monotonic() - started
    # Let background compaction catch up (the L0s of the last few flushes stay).
    deadline = time.monotonic() + 300
    while http.timeline_get(t, tl)["l0_layers"] >= 10 and time.monotonic() < deadline:
        time.sleep(0.5)
    # Wait for the background run to finish (the route waits for the
    # timeline's maintenance lock), so nothing runs beside the reads.
    http.timeline_compact(t, tl)
    info = http.timeline_get(t, tl)
    rows = []
    for depth in (1, 32):
        for name, target in (("fresh import", fresh), ("200 flushes" if not smoke else f"{flushes} flushes", updated)):
            _, before = histogram_p99(http.metrics_text())
            res = run_pagebench(ps, runtime=runtime, queue_depth=depth,
                                targets=[f"{target.tenant_id}/{target.timeline_id}"])
            assert res.error_count == 0, res.stderr[-2000:]
            p99, _ = histogram_p99(http.metrics_text(), before)
            rows.append({"timeline": name, "queue_depth": depth, "getpage_per_s": round(res.rps),
                         "mean_us": round(res.latency_us("mean")), "layers_visited_p99": p99})
    for depth in (1, 32):
        base, upd = [r for r in rows if r["queue_depth"] == depth]
        upd["of_fresh"] = round(upd["getpage_per_s"] / base["getpage_per_s"], 3)
    rows.append({"layers": {k: info[k] for k in ("l0_layers", "l1_layers", "image_layers")},
                 "ingest_s": round(ingest_s, 1)})
    summary(request, "read amplification after compaction", rows, "read_amplification")


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_memory_scale_10_vs_100(pageserver_factory, pgbench_backup, request):
    if request.config.getoption("--perf-smoke"):
        pytest.skip("scale 100 takes minutes to build and import")
    backup_100 = request.getfixturevalue("pgbench_s100_backup")
    rows = []
    for name, bb in (("scale 10", pgbench_backup), ("scale 100", backup_100)):
        ps = pageserver_factory.create(name=name.replace(" ", ""))
        ps.start()
        tl = import_backup(ps, bb)
        ps.http_client().timeline_compact(tl.tenant_id, tl.timeline_id, force_l0=True, force_images=True)
        run_pagebench(ps, runtime="10s", queue_depth=32)
        rows.append({"database": name, "rss_mib": round(rss_mib(ps.proc.pid), 1)})
        ps.stop()
    rows.append({"growth_mib": round(rows[1]["rss_mib"] - rows[0]["rss_mib"], 1)})
    summary(request, "daemon RSS, pgbench scale 10 vs 100", rows, "memory")


def test_compaction_throughput(pageserver_factory, testing_pageserver_bin, pgbench_backup, request, tmp_path):
    ps = pageserver_factory.create(binary=testing_pageserver_bin, overrides={"compaction_period": "0 s"})
    ps.start()
    http = ps.http_client()
    tl = import_backup(ps, pgbench_backup)
    t, tid = tl.tenant_id, tl.timeline_id
    http.timeline_compact(t, tid, force_l0=True)  # the import's own small L0 out of the way
    tl_dir = next(p for p in ps.workdir.rglob(tid) if p.is_dir())
    layer_files = lambda: {p for p in tl_dir.iterdir() if "__" in p.name and "___" not in p.name}  # noqa: E731
    before = layer_files()
    keys = rel_blocks(http, t, tid)
    rng = random.Random(2)
    lsn = lsn_int(http.timeline_get(t, tid)["last_record_lsn"])
    for i in range(0, len(keys), 1000):
        lsn += 0x1000
        http.testing_ingest(t, tid, fmt_lsn(lsn), {k: rng.randbytes(PAGE) for k in keys[i : i + 1000]})
    http.timeline_checkpoint(t, tid)
    l0s = sorted(layer_files() - before)
    assert len(l0s) == 1 and http.timeline_get(t, tid)["l0_layers"] == 1, f"one new L0 expected: {l0s}"
    l0_bytes = sum(p.stat().st_size for p in l0s)
    # Baseline: copy the same bytes and make them durable.
    started = time.monotonic()
    for p in l0s:
        shutil.copyfile(p, tmp_path / p.name)
    subprocess.run(["sync"], check=True)
    copy_s = time.monotonic() - started
    started = time.monotonic()
    report = http.timeline_compact(tl.tenant_id, tl.timeline_id, force_l0=True)
    compact_s = time.monotonic() - started
    mib = l0_bytes / (1 << 20)
    rows = [{"l0_mib": round(mib, 1), "l1_layers": report["l1_layers_written"],
             "compaction_mib_s": round(mib / compact_s, 1), "copy_mib_s": round(mib / copy_s, 1),
             "of_copy": round(copy_s / compact_s, 3)}]
    summary(request, "compaction throughput vs a file copy", rows, "compaction_throughput")
