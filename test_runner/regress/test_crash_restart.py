"""Durability across kill -9: whatever the API acknowledged survives a crash
and a restart; an import cut short by a crash leaves nothing behind and can be
retried; with failpoints (testing build), a crash at each step of the flush
path loses nothing acknowledged and leaves no temporary file."""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

import pytest
import requests

from fixtures.compare import ImportedTimeline, compare_all, import_backup
from fixtures.http import PageserverApiError
from fixtures.pageserver import REPO_ROOT
from fixtures.utils import wait_until


def test_kill9_after_import_keeps_everything(pageserver, pgbench_backup):
    tl = import_backup(pageserver, pgbench_backup)
    before = pageserver.http_client().timeline_get(tl.tenant_id, tl.timeline_id)
    pageserver.kill()
    pageserver.start()
    after = pageserver.http_client().timeline_get(tl.tenant_id, tl.timeline_id)
    assert after["last_record_lsn"] == before["last_record_lsn"]
    assert after["disk_consistent_lsn"] == before["disk_consistent_lsn"]
    compare_all(pageserver, tl, pgbench_backup)
    assert not pageserver.temp_files()


def test_graceful_restart_keeps_everything(pageserver, small_backup):
    tl = import_backup(pageserver, small_backup)
    took = pageserver.stop()
    assert took < 10, f"graceful shutdown of an idle pageserver took {took:.1f}s"
    pageserver.start()
    compare_all(pageserver, tl, small_backup)


def _slow_body(path: Path, chunk: int, delay: float, sent: list[int]):
    with open(path, "rb") as f:
        while data := f.read(chunk):
            sent[0] += len(data)
            yield data
            time.sleep(delay)


def test_kill9_during_import_leaves_nothing(pageserver, pgbench_backup):
    http = pageserver.http_client()
    tenant = http.tenant_create()
    timeline = os.urandom(16).hex()
    total = pgbench_backup.path.stat().st_size
    sent = [0]
    errors: list[BaseException] = []

    def run():
        try:
            requests.put(
                f"{pageserver.http_endpoint}/v1/tenant/{tenant}/timeline/{timeline}/import_basebackup",
                data=_slow_body(pgbench_backup.path, 1 << 20, 0.01, sent),
                timeout=300,
            )
        except BaseException as e:  # noqa: BLE001 - the connection dies with the server
            errors.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    def half_sent():
        assert sent[0] >= total // 2, f"{sent[0]} of {total} bytes sent"

    wait_until(half_sent, timeout=120)
    pageserver.kill()
    t.join(timeout=60)
    assert not t.is_alive()
    assert errors, "the import cannot have succeeded: the server was killed halfway"

    pageserver.start()
    with pytest.raises(PageserverApiError) as e:
        http.timeline_get(tenant, timeline)
    assert e.value.status == 404, "a half-imported timeline is visible after restart"
    assert timeline not in http.tenant_get(tenant)["timelines"]
    assert not pageserver.temp_files(), f"temporary files left: {pageserver.temp_files()}"
    tl_dirs = [p for p in pageserver.workdir.rglob(timeline + "*")]
    assert not tl_dirs, f"leftovers of the interrupted import: {tl_dirs}"

    # The retry succeeds and serves everything.
    http.import_basebackup(tenant, timeline, str(pgbench_backup.path))
    compare_all(pageserver, ImportedTimeline(tenant, timeline), pgbench_backup)


def discover_failpoints() -> list[str]:
    """Every `failpoint("name")` call site in the daemon's (non-test) source."""
    names = set()
    for p in (REPO_ROOT / "pageserver" / "src").rglob("*.rs"):
        if p.name == "tests.rs" or p.name.endswith("_tests.rs"):
            continue  # unit tests exercise the mechanism with names of their own
        text = p.read_text(errors="replace")
        names.update(re.findall(r'failpoint\(\s*"([^"]+)"', text))
        # A crash-safe write (`TempFile`) named with a prefix has a failpoint
        # before its fsync, before its rename and after its rename.
        for prefix in re.findall(r'with_failpoints\(\s*"([^"]+)"', text):
            names.update(f"{prefix}::{step}" for step in ("before-fsync", "before-rename", "after-rename"))
    return sorted(names)


# Branch creation's failpoints are off the import path: test_branches.py
# crashes at them while creating a branch.
# Not on the import path: tested where they fire (test_branches.py, test_failover.py).
FAILPOINTS = [f for f in discover_failpoints() if not f.startswith(("branch-create::", "divergence-branch::"))]
# Failpoints every import passes through (its final flush and timeline rename).
IMPORT_PATH_PREFIXES = ("flush::", "timeline-create::")


@pytest.mark.failpoints
@pytest.mark.parametrize("failpoint", FAILPOINTS or ["<none found>"])
def test_crash_at_failpoint_loses_nothing_acknowledged(pageserver_factory, testing_pageserver_bin, small_backup, failpoint):
    """Crash (`exit`) at the failpoint during an import, restart without it:
    no temp files; an acknowledged import is served completely; an
    unacknowledged one is either absent (and a retry works) or complete."""
    if not FAILPOINTS:
        pytest.skip("no failpoint call sites found in pageserver/src")
    ps = pageserver_factory.create(binary=testing_pageserver_bin)
    ps.start()
    http = ps.http_client()
    # A first timeline, acknowledged before the failpoint is armed.
    first = import_backup(ps, small_backup)
    http.configure_failpoints({failpoint: "exit"})
    tenant, timeline = first.tenant_id, os.urandom(16).hex()
    acknowledged = False
    try:
        http.import_basebackup(tenant, timeline, str(small_backup.path))
        acknowledged = True
        http.timeline_checkpoint(tenant, timeline)
    except (PageserverApiError, requests.ConnectionError):
        pass
    # The HTTP connection breaks a moment before the process can be reaped.
    deadline = time.monotonic() + 5
    while ps.is_running() and time.monotonic() < deadline:
        time.sleep(0.05)
    crashed = not ps.is_running()
    if crashed:
        ps.stop()  # reap it
    else:
        # The failpoint is not on the import/checkpoint path: crash anyway.
        ps.kill()
    if failpoint.startswith(IMPORT_PATH_PREFIXES):
        assert crashed, f"{failpoint} is on the import path but the daemon did not exit there"
    ps.start()
    assert not ps.temp_files(), f"temporary files after crash at {failpoint}: {ps.temp_files()}"
    compare_all(ps, first, small_backup)
    second = ImportedTimeline(tenant, timeline)
    try:
        http.timeline_get(tenant, timeline)
        present = True
    except PageserverApiError as e:
        assert e.status == 404, e
        present = False
    assert present or not acknowledged, f"acknowledged import lost by a crash at {failpoint}"
    if not present:
        # Not acknowledged and not there: nothing half-done, a retry works.
        assert not list(ps.workdir.rglob(timeline + "*")), "leftovers of the interrupted import"
        http.import_basebackup(tenant, timeline, str(small_backup.path))
    # Present (acknowledged, or made durable just before the crash) means complete.
    compare_all(ps, second, small_backup)
    ps.allow_errors(r"(?i)failpoint")
