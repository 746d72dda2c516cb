"""Memory of the daemon across a base-backup import (issue 27, item 6):
the import must not hold memory that grows with the data.

One daemon imports `pgbench -i` base backups of scale 10, 100 and 300
(173 MB, 1.5 GB, 4.5 GB; PostgreSQL 15) through `PUT .../import_basebackup`,
one tenant each. Before each import the process's peak RSS is reset
(`5 > /proc/<pid>/clear_refs`, as root), so each import's peak (VmHWM) is
its own. RSS is also read right after the import and 5 s later (jemalloc
returns freed pages after 1 s). Every page of every import is then compared
with the backup (`compare_all`), which covers relations of several 1 GiB
segments written straight to image layers (`import::rel_images`).

Not in the smoke run (the scale-100 and -300 backups take minutes to
build); a single scale in the smoke run would not show growth.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fixtures.compare import compare_all, import_backup
from fixtures.utils import process_memory_mb

pytestmark = pytest.mark.perf

SCALES = [10, 100, 300]
# An import's peak over the daemon's RSS before it, at any scale. Before
# large files went to image layers it grew by ~100 bytes per page.
PEAK_GROWTH_LIMIT_MB = 96


def reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5\n")


def test_import_memory_is_bounded(pageserver, request):
    if request.config.getoption("--perf-smoke"):
        pytest.skip("needs the scale-100 and -300 backups; not in the smoke run")
    pid = pageserver.proc.pid
    rows = []
    for scale in SCALES:
        name = "pgbench_backup" if scale == 10 else f"pgbench_s{scale}_backup"
        backup = request.getfixturevalue(name)
        before = process_memory_mb(pid)["VmRSS"]
        reset_peak(pid)
        started = time.monotonic()
        tl = import_backup(pageserver, backup)
        took_s = time.monotonic() - started
        after = process_memory_mb(pid)
        time.sleep(5)
        later = process_memory_mb(pid)["VmRSS"]
        stats = compare_all(pageserver, tl, backup)
        rows.append((scale, backup.path.stat().st_size >> 20, took_s, before, after["VmHWM"], after["VmRSS"], later, stats.pages))
        pageserver.http_client().tenant_delete(tl.tenant_id)
    print("\n| scale | tar MiB | import s | RSS before MB | peak MB | RSS after MB | RSS 5 s later MB | pages compared |")
    print("|---|---|---|---|---|---|---|---|")
    for scale, mib, took_s, before, peak, after, later, pages in rows:
        print(f"| {scale} | {mib} | {took_s:.1f} | {before} | {peak} | {after} | {later} | {pages} |")
    for scale, _, _, before, peak, *_ in rows:
        assert peak - before <= PEAK_GROWTH_LIMIT_MB, (
            f"scale {scale}: the import's peak RSS is {peak} MB, {peak - before} MB over the "
            f"{before} MB before it (limit {PEAK_GROWTH_LIMIT_MB} MB)"
        )
