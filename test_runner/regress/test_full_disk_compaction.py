"""A compaction that runs out of disk space (issue 27, item 10): the daemon's
workdir is a small tmpfs, L0 layers are ingested (testing build), the disk
is filled up to a little less than the L1s need, and `PUT .../compact`
fails. Then: no temp file is left (the space the failed write took is free
again at once, not at the next restart), the error says each thing once,
and once space is freed the next compaction succeeds and every page reads
back. Needs root (mount)."""

from __future__ import annotations

import os
import random
import subprocess

import pytest

from fixtures.http import PageserverApiError
from fixtures.utils import fmt_lsn

TMPFS_BYTES = 48 << 20
# Background tasks off: the test runs compaction itself.
MANUAL = {"compaction_period": "0 s", "gc_period": "0 s", "pitr_interval": "0 s"}
ROUNDS = 8
KEYS_PER_ROUND = 48
# What the failed compaction may leave used (metadata, allocation slack).
SLACK_BYTES = 256 << 10


def lsn_int(s: str) -> int:
    hi, lo = s.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def rel_key(block: int) -> str:
    return f"00{1663:08X}{5:08X}{16384:08X}00{block:08X}"


def free_bytes(path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def repeated_segments(msg: str) -> list[str]:
    """Segments of an error chain ("a: b: c") that occur more than once."""
    parts = [p.strip() for p in msg.split(": ")]
    return sorted({p for p in parts if parts.count(p) > 1})


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


def test_compaction_out_of_space_removes_its_files(pageserver_factory, tmpfs_workdir, testing_pageserver_bin):
    ps = pageserver_factory.create(binary=testing_pageserver_bin, overrides=MANUAL).start()
    assert ps.workdir == tmpfs_workdir
    ps.allow_errors("HTTP request failed: .*No space left on device")
    http = ps.http_client()
    tenant = http.tenant_create()
    timeline = http.timeline_create(tenant)["timeline_id"]
    lsn = lsn_int(http.timeline_get(tenant, timeline)["last_record_lsn"])
    rng = random.Random(0x27)
    latest: dict[str, bytes] = {}
    for _ in range(ROUNDS):  # one L0 each
        lsn += 0x100
        images = {rel_key(rng.randrange(512)): rng.randbytes(8192) for _ in range(KEYS_PER_ROUND)}
        http.testing_ingest(tenant, timeline, fmt_lsn(lsn), images)
        latest.update(images)
        http.timeline_checkpoint(tenant, timeline)

    # Leave less room than the L1s need (about the L0s' size, > 2 MiB).
    filler = tmpfs_workdir / "filler"
    with open(filler, "wb") as f:
        f.write(bytes(max(0, free_bytes(tmpfs_workdir) - (1 << 20))))
    before = free_bytes(tmpfs_workdir)
    with pytest.raises(PageserverApiError) as e:
        http.timeline_compact(tenant, timeline, force_l0=True)
    err = e.value
    assert err.status == 500 and "No space left on device" in err.msg, err
    # Nothing of the failed compaction is left, and its space is free again.
    leftovers = [p.name for p in tmpfs_workdir.rglob("*") if p.name.endswith(".___temp") or "layer-writer" in p.name]
    assert leftovers == [], leftovers
    assert free_bytes(tmpfs_workdir) >= before - SLACK_BYTES, (free_bytes(tmpfs_workdir), before)
    assert repeated_segments(err.msg) == [], f"each thing once: {err.msg}"
    logged = ps.log_contains("HTTP request failed: .*No space left on device")
    assert logged is not None and repeated_segments(logged.split("HTTP request failed: ", 1)[1]) == [], logged

    filler.unlink()
    report = http.timeline_compact(tenant, timeline, force_l0=True)
    assert report["l0_layers_compacted"] >= ROUNDS and report["l1_layers_written"] >= 1, report
    for key, want in latest.items():
        assert http.testing_get(tenant, timeline, key, fmt_lsn(lsn)) == want, key
    assert ps.temp_files() == []
