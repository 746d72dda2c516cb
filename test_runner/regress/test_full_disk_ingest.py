"""A full disk while the daemon follows a primary (issue 27, item 5): the
daemon's workdir is a small tmpfs, a filler file leaves it almost full, and
pgbench writes on the primary. The in-memory layer's writes and the L0
flushes fail with ENOSPC. Meanwhile: no panic, the timeline API shows the
error (`wal_source.last_error`), a checkpoint returns instead of hanging.
Once the filler is removed, ingest resumes by itself, and the pages served
equal the primary's. Needs root (mount)."""

from __future__ import annotations

import os
import subprocess
import time

import pytest
import requests

from fixtures.pagestream import parse_lsn
from fixtures.wal_compare import compare_with_primary, follow_primary

# Room for the bootstrap, the WAL of the pgbench run below as in-memory
# layers and their L0 flushes, and a margin.
TMPFS_BYTES = 128 << 20
# Left free by the filler: a few in-memory layer writes (256 KiB each).
FREE_BYTES = 3 << 20
PRIMARY_SETTINGS = {
    "wal_consistency_checking": "'all'",
    "max_replication_slots": "4",
    "wal_compression": "zstd",
}
NOSPC = "No space left on device"
# What a full disk logs; a panic never matches these (see pageserver.py).
FULL_DISK_ERRORS = [
    rf"replication failed: .*{NOSPC}",
    rf"layer flush failed, will retry: .*{NOSPC}",
    rf"HTTP request failed: .*{NOSPC}",
    rf"compaction failed, will retry: .*{NOSPC}",
    rf"could not remove .*{NOSPC}",
]
PRIMARY_GONE = [r"replication failed: .*(Connection refused|connection closed|closed the connection|shutting down|terminating|57P0[1-3])"]


def free_bytes(path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


@pytest.fixture
def tmpfs_workdir(test_output_dir, pageserver_factory):
    if os.geteuid() != 0:
        pytest.skip("mounts a tmpfs: needs root")
    workdir = test_output_dir / "pageserver"
    workdir.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs", str(workdir)], check=True)
    try:
        yield workdir
    finally:
        # Stop the daemon before its filesystem goes (the factory's own
        # teardown, later, still checks its log, which is not on the tmpfs).
        for ps in pageserver_factory.instances:
            if ps.is_running():
                ps.stop(timeout=30)
        subprocess.run(["umount", str(workdir)], check=True)


def wait_for(what: str, timeout: float, cond):
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_full_disk_during_ingest_resumes_without_panic(pageserver_factory, tmpfs_workdir, vanilla_pg):
    ps = pageserver_factory.create().start()
    assert ps.workdir == tmpfs_workdir
    ps.allow_errors(*FULL_DISK_ERRORS)
    pg = vanilla_pg.init(PRIMARY_SETTINGS).start()
    pg.pgbench_init(1)
    http, tenant, timeline = follow_primary(ps, pg, PRIMARY_GONE)
    tl_url = f"{http.base}/v1/tenant/{tenant}/timeline/{timeline}"
    lsn = parse_lsn(pg.psql("SELECT pg_current_wal_insert_lsn()"))
    wait_for("bootstrap", 30, lambda: parse_lsn(http.timeline_get(tenant, timeline)["last_record_lsn"]) >= lsn)

    filler = tmpfs_workdir / "filler"
    with open(filler, "wb") as f:
        f.write(bytes(max(0, free_bytes(tmpfs_workdir) - FREE_BYTES)))
    bench = subprocess.Popen(
        # A fixed number of transactions (about 6 MB of WAL with images),
        # not a duration: the space the run needs must not depend on the
        # machine's speed. The WAL waits in the slot while the disk is full.
        pg._cmd("pgbench", "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres", "-c", "2", "-t", "400", "postgres"),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/",
    )
    try:
        # The API shows the error while the disk is full.
        def full_disk_error():
            src = http.timeline_get(tenant, timeline)["wal_source"]
            return src if NOSPC in (src.get("last_error") or "") else None

        src = wait_for("the full disk error in the API", 20, full_disk_error)
        # A failing flush shows as such; a failing write of the stream ends
        # the session (reconnecting).
        assert src["state"] in ("flush failing", "connecting", "streaming", "waiting to reconnect"), src
        stuck = parse_lsn(http.timeline_get(tenant, timeline)["last_record_lsn"])
        # A checkpoint under the full disk returns: it fails naming the
        # error, or completes (what it must flush may still fit).
        started = time.monotonic()
        resp = requests.post(f"{tl_url}/checkpoint", timeout=30)
        assert time.monotonic() - started < 20, "checkpoint hangs on a full disk"
        assert resp.status_code == 200 or NOSPC in resp.text, (resp.status_code, resp.text)
    finally:
        bench.wait(timeout=60)

    # Space is back: ingest resumes by itself, past where it was stuck.
    filler.unlink()
    pg.psql("CHECKPOINT")
    end = parse_lsn(pg.psql("SELECT pg_current_wal_insert_lsn()"))
    assert end > stuck
    # Streaming again once a flush succeeds (the failing one is retried).
    wait_for(
        "ingest to resume and flushes to succeed", 40,
        lambda: (i := http.timeline_get(tenant, timeline))
        and parse_lsn(i["last_record_lsn"]) >= end
        and i["wal_source"]["state"] == "streaming"
        and i,
    )
    res = compare_with_primary(ps, tenant, timeline, pg, end)
    assert res.pages > 100, res
    assert not res.mismatches, f"{len(res.mismatches)} mismatches of {res.pages} pages:\n" + "\n".join(res.mismatches[:40])
    # The timeline flushes again: a checkpoint succeeds.
    assert requests.post(f"{tl_url}/checkpoint", timeout=30).status_code == 200
    assert ps.log_contains("panicked at") is None
