"""Backups in bounded memory (issue 27, item 6): a basebackup whose client
does not read holds a bounded amount of memory (the tar is streamed and the
WAL segment made page by page), and at most `max_concurrent_backups` (in
all) and `max_concurrent_backups_per_tenant` run at once; one more is
refused at once with SQLSTATE 53300 over libpq and 503 over HTTP, naming
the limit. Slots come back when clients leave."""

from __future__ import annotations

import time

import pytest

from fixtures.compare import import_backup
from fixtures.http import PageserverApiError
from fixtures.libpq import ServerError, encode_message
from test_client_limits import rss_kib


def stalled_backup(ps, tenant: str, timeline: str):
    """A libpq session that asks for a basebackup and never reads it."""
    conn = ps.libpq()
    conn.connect()
    conn.send_raw(encode_message(b"Q", f"basebackup {tenant} {timeline}".encode() + b"\0"))
    return conn


def wait_for_slots(ps, want: int, timeout: float = 30.0) -> None:
    """Until `want` backups are being generated (the gauge)."""
    deadline = time.monotonic() + timeout
    while ps.http_client().metrics().value_or("pageserver_backups_running", 0.0) != want:
        assert time.monotonic() < deadline, f"{want} backups never ran at once"
        time.sleep(0.1)


def test_backup_limits_refuse_clearly_and_release(pageserver_factory, small_backup):
    ps = pageserver_factory.create(
        overrides={"max_concurrent_backups": 3, "max_concurrent_backups_per_tenant": 2}
    ).start()
    a, b, c = (import_backup(ps, small_backup) for _ in range(3))
    held = [stalled_backup(ps, a.tenant_id, a.timeline_id) for _ in range(2)]
    wait_for_slots(ps, 2)
    with ps.libpq() as conn, pytest.raises(ServerError) as e:
        conn.copy_out(f"basebackup {a.tenant_id} {a.timeline_id}", open("/dev/null", "wb"))
    assert e.value.code == "53300" and "max_concurrent_backups_per_tenant" in e.value.message, e.value
    held.append(stalled_backup(ps, b.tenant_id, b.timeline_id))
    wait_for_slots(ps, 3)
    with pytest.raises(PageserverApiError) as he:
        ps.http_client().request("GET", f"/v1/tenant/{c.tenant_id}/timeline/{c.timeline_id}/fullbackup")
    assert he.value.status == 503 and "(max_concurrent_backups)" in he.value.msg, he.value
    # Clients that leave give their slots back.
    for conn in held:
        conn.close()
    wait_for_slots(ps, 0)
    with ps.libpq() as conn, open("/dev/null", "wb") as out:
        assert conn.copy_out(f"basebackup {c.tenant_id} {c.timeline_id}", out) > 16 << 20


def test_stalled_backups_hold_bounded_memory(pageserver_factory, small_backup):
    """100 basebackup clients that never read (limits raised to let them
    all run): the daemon's RSS grows by a bounded amount per client, far
    below the 16 MiB WAL segment each used to hold."""
    n = 100
    ps = pageserver_factory.create(
        overrides={"max_concurrent_backups": n, "max_concurrent_backups_per_tenant": n}
    ).start()
    tl = import_backup(ps, small_backup)
    time.sleep(1.5)  # the allocator gives back what the import freed
    before = rss_kib(ps.proc.pid)
    held = [stalled_backup(ps, tl.tenant_id, tl.timeline_id) for _ in range(n)]
    try:
        wait_for_slots(ps, n, timeout=60)
        time.sleep(2)  # each generator fills what it can and blocks
        growth_mib = (rss_kib(ps.proc.pid) - before) / 1024
        print(f"{n} stalled basebackups: RSS grew by {growth_mib:.0f} MiB ({growth_mib / n * 1024:.0f} KiB each)")
        assert growth_mib < n * 2, f"{n} stalled backups grew RSS by {growth_mib:.0f} MiB"
    finally:
        for conn in held:
            conn.close()
