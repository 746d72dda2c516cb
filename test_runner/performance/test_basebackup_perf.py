"""Base backup generation: `fullbackup` throughput beside `pg_basebackup` of
the same database from the primary (same run, both written to the same
disk), and `basebackup` latency (Neon's compute format, no relation data).

Per scale (pgbench 10 and 100; 1 in the smoke run): initialise a
PostgreSQL 15 primary, time `pg_basebackup -Ft -X none` (the baseline),
import that tar into the daemon, then time `fullbackup` at the imported
LSN to a file, and `basebackup` (plain and `--gzip`) five times each to
memory (client-side time: query to ReadyForQuery, which includes moving
16 MiB of WAL segment into Python; the daemon's own generation time is
read from its log). Figures go to test_output/perf/basebackup.json and the summary.
"""

from __future__ import annotations

import io
import json
import os
import re
import statistics
import time

import pytest

from fixtures.backup import fetch_backup
from fixtures.compare import ImportedTimeline
from fixtures.pageserver import TEST_OUTPUT
from fixtures.pagestream import parse_lsn
from fixtures.vanilla_pg import VanillaPostgres
from fixtures.utils import fmt_lsn

pytestmark = pytest.mark.perf

MIB = 1024 * 1024
LATENCY_RUNS = 5


def scales(request) -> list[int]:
    return [1] if request.config.getoption("--perf-smoke") else [10, 100]


def time_basebackup(ps, tenant: str, timeline: str, *flags: str) -> tuple[list[float], int]:
    """Client-side seconds from query to ReadyForQuery, per run; bytes."""
    secs, size = [], 0
    with ps.libpq() as conn:
        for _ in range(LATENCY_RUNS):
            buf = io.BytesIO()
            t0 = time.perf_counter()
            size = conn.copy_out(" ".join(["basebackup", tenant, timeline, *flags]), buf)
            secs.append(time.perf_counter() - t0)
    return secs, size


def server_ms(ps, flavour: str) -> list[float]:
    """Generation times the daemon logged ("<flavour> of ... sent: ... in <duration>")."""
    unit = {"s": 1000.0, "ms": 1.0, "µs": 0.001, "us": 0.001, "ns": 1e-6}
    out = []
    for line in ps.log_lines():
        m = re.search(rf"{flavour} of .* sent: .* in ([0-9.]+)(ns|µs|us|ms|s)\b", line)
        if m:
            out.append(float(m.group(1)) * unit[m.group(2)])
    return out


def measure_scale(pageserver_factory, test_output_dir, port_distributor, scale: int) -> dict:
    pg = VanillaPostgres(test_output_dir / f"pg_s{scale}", port_distributor.get())
    pg.init().start()
    try:
        pg.pgbench_init(scale)
        pg.psql("CHECKPOINT")
        t0 = time.perf_counter()
        tar = pg.basebackup_tar(test_output_dir / f"pg_basebackup_s{scale}")
        pg_basebackup_s = time.perf_counter() - t0
    finally:
        pg.stop(mode="immediate")
        pg.release()
    pg_basebackup_bytes = tar.stat().st_size
    ps = pageserver_factory.create(f"ps_s{scale}").start()
    http = ps.http_client()
    tl = ImportedTimeline(http.tenant_create(), os.urandom(16).hex())
    http.import_basebackup(tl.tenant_id, tl.timeline_id, str(tar), timeout=1800)
    tar.unlink()
    lsn = parse_lsn(http.timeline_get(tl.tenant_id, tl.timeline_id)["last_record_lsn"])
    t0 = time.perf_counter()
    full = fetch_backup(ps, "fullbackup", tl.tenant_id, tl.timeline_id, test_output_dir / f"full_s{scale}.tar", fmt_lsn(lsn))
    fullbackup_s = time.perf_counter() - t0
    fullbackup_bytes = full.stat().st_size
    full.unlink()
    plain, plain_bytes = time_basebackup(ps, tl.tenant_id, tl.timeline_id)
    gz, gz_bytes = time_basebackup(ps, tl.tenant_id, tl.timeline_id, "--gzip")
    generated = server_ms(ps, "basebackup")
    assert len(generated) == 2 * LATENCY_RUNS, generated
    ps.stop()
    return {
        "scale": scale,
        "pg_basebackup_mib": round(pg_basebackup_bytes / MIB, 1),
        "pg_basebackup_mib_per_s": round(pg_basebackup_bytes / MIB / pg_basebackup_s, 1),
        "fullbackup_mib": round(fullbackup_bytes / MIB, 1),
        "fullbackup_mib_per_s": round(fullbackup_bytes / MIB / fullbackup_s, 1),
        "basebackup_mib": round(plain_bytes / MIB, 1),
        "basebackup_ms_median": round(statistics.median(plain) * 1000, 1),
        "basebackup_ms_max": round(max(plain) * 1000, 1),
        "basebackup_server_ms_median": round(statistics.median(generated[:LATENCY_RUNS]), 1),
        "basebackup_gzip_kib": round(gz_bytes / 1024, 1),
        "basebackup_gzip_ms_median": round(statistics.median(gz) * 1000, 1),
    }


def test_basebackup_perf(pageserver_factory, test_output_dir, port_distributor, request):
    rows = [measure_scale(pageserver_factory, test_output_dir, port_distributor, s) for s in scales(request)]
    for r in rows:
        assert r["fullbackup_mib"] >= r["pg_basebackup_mib"] * 0.9, r  # every page is there
    out = TEST_OUTPUT / "perf"
    out.mkdir(parents=True, exist_ok=True)
    (out / "basebackup.json").write_text(json.dumps(rows, indent=2))
    request.config.perf_summaries.append(("base backups", "\n".join(json.dumps(r) for r in rows)))
