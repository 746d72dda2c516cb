"""Compaction, image layers and GC against the release daemon: a compacted
import still serves every page byte for byte; history written over many
flushes reads back at every LSN through L1 and image layers; GC removes
covered layers, refuses reads below its cutoff naming it, keeps what a lease
holds; a crash at every step of compaction, image creation and GC loses
nothing (testing build, failpoints)."""

from __future__ import annotations

import os
import random
import time

import pytest

from fixtures.compare import compare_all, import_backup
from fixtures.http import PageserverApiError
from fixtures.utils import fmt_lsn
from test_crash_restart import FAILPOINTS

# Background tasks off: the tests run compaction and GC themselves.
MANUAL = {"compaction_period": "0 s", "gc_period": "0 s", "pitr_interval": "0 s"}


def lsn_int(s: str) -> int:
    hi, lo = s.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def rel_key(block: int) -> str:
    """A relation block key (rel 1663/5/16384, main fork) as 36 hex digits."""
    return f"00{1663:08X}{5:08X}{16384:08X}00{block:08X}"


class History:
    """Pages written at many LSNs over many flushes, and what each read
    must return."""

    def __init__(self, http, tenant: str, timeline: str, nkeys: int = 64):
        self.http, self.tenant, self.timeline = http, tenant, timeline
        self.keys = [rel_key(b) for b in range(nkeys)]
        self.lsn = lsn_int(http.timeline_get(tenant, timeline)["last_record_lsn"])
        self.versions: dict[str, list[tuple[int, bytes]]] = {k: [] for k in self.keys}
        self.rng = random.Random(0x5EED)

    def write_rounds(self, rounds: int, keys_per_round: int = 24) -> None:
        """Each round: new images of some keys at a new LSN, then a checkpoint
        (one L0 per round). The first round writes every key."""
        for r in range(rounds):
            self.lsn += 0x100
            first = not any(self.versions.values())
            chosen = self.keys if first else self.rng.sample(self.keys, keys_per_round)
            images = {k: os.urandom(2000) + self.lsn.to_bytes(8, "little") + k.encode() for k in chosen}
            self.http.testing_ingest(self.tenant, self.timeline, fmt_lsn(self.lsn), images)
            for k, v in images.items():
                self.versions[k].append((self.lsn, v))
            self.http.timeline_checkpoint(self.tenant, self.timeline)

    def lsns(self) -> list[int]:
        return sorted({lsn for vs in self.versions.values() for lsn, _ in vs})

    def expected(self, key: str, lsn: int) -> bytes | None:
        found = None
        for at, v in self.versions[key]:
            if at <= lsn:
                found = v
        return found

    def check(self, from_lsn: int = 0) -> int:
        """Every key at every written LSN at or above `from_lsn`."""
        reads = 0
        for lsn in [x for x in self.lsns() if x >= from_lsn]:
            for k in self.keys:
                want = self.expected(k, lsn)
                if want is None:
                    continue
                got = self.http.testing_get(self.tenant, self.timeline, k, fmt_lsn(lsn))
                assert got == want, f"key {k} at {fmt_lsn(lsn)}: served {got.hex()}, wrote {want.hex()}"
                reads += 1
        return reads


def new_history(ps) -> History:
    http = ps.http_client()
    tenant = http.tenant_create()
    timeline = http.timeline_create(tenant)["timeline_id"]
    return History(http, tenant, timeline)


def test_compacted_import_serves_every_page(pageserver_factory, pgbench_backup):
    ps = pageserver_factory.create(overrides={**MANUAL, "compaction_target_size": "8 MiB"})
    ps.start()
    http = ps.http_client()
    tl = import_backup(ps, pgbench_backup)
    # The import wrote its large files as images of at most the 8 MiB
    # target (pgbench_accounts alone is 128 MiB), the rest as one L0.
    imported = http.timeline_get(tl.tenant_id, tl.timeline_id)
    assert imported["l0_layers"] == 1 and imported["image_layers"] >= 16, imported
    report = http.timeline_compact(tl.tenant_id, tl.timeline_id, force_l0=True, force_images=True)
    assert report["l0_layers_compacted"] >= 1, report
    assert report["l1_layers_written"] >= 2, f"an 8 MiB target splits the import's ~23 MB L0: {report}"
    assert report["image_layers_written"] >= 1, f"no images where the import wrote none: {report}"
    info = http.timeline_get(tl.tenant_id, tl.timeline_id)
    assert info["l0_layers"] == 0 and info["l1_layers"] == report["l1_layers_written"], info
    compare_all(ps, tl, pgbench_backup)
    ps.stop()
    ps.start()
    compare_all(ps, tl, pgbench_backup)


@pytest.mark.failpoints
def test_history_through_compaction_images_and_gc(pageserver_factory, testing_pageserver_bin):
    overrides = {**MANUAL, "compaction_threshold": 4, "image_creation_threshold": 1,
                 "compaction_target_size": "64 KiB", "lsn_lease_length": "3 s"}
    ps = pageserver_factory.create(binary=testing_pageserver_bin, overrides=overrides)
    ps.start()
    h = new_history(ps)
    http, t, tl = h.http, h.tenant, h.timeline
    h.write_rounds(6)
    assert http.timeline_get(t, tl)["l0_layers"] == 6
    first = http.timeline_compact(t, tl)
    assert first["l0_layers_compacted"] == 6 and first["l1_layers_written"] >= 2, first
    h.write_rounds(5)
    second = http.timeline_compact(t, tl)
    assert second["l0_layers_compacted"] == 5, second
    assert second["image_layers_written"] >= 1, f"two L1 strata above no image: {second}"
    h.write_rounds(3)
    assert h.check() > 0

    # A lease in the middle of the history holds GC back to it.
    lease_lsn = h.lsns()[len(h.lsns()) // 2]
    http._json("POST", f"/v1/tenant/{t}/timeline/{tl}/lsn_lease", json={"lsn": fmt_lsn(lease_lsn)})
    held = http.timeline_gc(t, tl, gc_horizon=0)
    assert lsn_int(held["gc_cutoff"]) <= lease_lsn, held
    h.check(from_lsn=lease_lsn)

    # Once the lease expires, GC goes to the horizon.
    time.sleep(3.5)
    report = http.timeline_gc(t, tl, gc_horizon=0)
    cutoff = lsn_int(report["gc_cutoff"])
    assert cutoff > lease_lsn and report["layers_removed"] >= 1, report
    info = http.timeline_get(t, tl)
    assert info["gc_cutoff"] == report["gc_cutoff"], info
    h.check(from_lsn=cutoff)
    below = cutoff - 1
    with pytest.raises(PageserverApiError) as e:
        http.testing_get(t, tl, h.keys[0], fmt_lsn(below))
    assert e.value.status == 400 and fmt_lsn(cutoff) in e.value.msg, e.value.msg

    ps.stop()
    ps.start()
    assert http.timeline_get(t, tl)["gc_cutoff"] == report["gc_cutoff"], "the cutoff is durable"
    h.check(from_lsn=cutoff)
    assert not ps.temp_files()


MAINTENANCE_FAILPOINTS = [f for f in FAILPOINTS if f.startswith(("compaction::", "image-creation::", "gc::", "layer-write::"))]


@pytest.mark.failpoints
@pytest.mark.parametrize("failpoint", MAINTENANCE_FAILPOINTS or ["<none found>"])
def test_crash_during_maintenance_loses_nothing(pageserver_factory, testing_pageserver_bin, failpoint):
    """kill -9 (`exit`) at each step of compaction, image creation and GC:
    after a restart every page at every LSN at or above the GC cutoff reads
    back as written, and the interrupted work can run again."""
    if not MAINTENANCE_FAILPOINTS:
        pytest.skip("no maintenance failpoints found in pageserver/src")
    overrides = {**MANUAL, "compaction_threshold": 3, "image_creation_threshold": 1,
                 "compaction_target_size": "64 KiB"}
    ps = pageserver_factory.create(binary=testing_pageserver_bin, overrides=overrides)
    ps.start()
    h = new_history(ps)
    http, t, tl = h.http, h.tenant, h.timeline
    h.write_rounds(4)
    http.timeline_compact(t, tl)
    h.write_rounds(4)
    http.configure_failpoints({failpoint: "exit"})
    try:
        if failpoint.startswith("gc::"):
            http.timeline_compact(t, tl, force_images=True)
            http.timeline_gc(t, tl, gc_horizon=0x200)
        else:
            http.timeline_compact(t, tl, force_l0=True, force_images=True)
    except Exception:  # noqa: BLE001 - the connection dies with the daemon
        pass
    deadline = time.monotonic() + 10
    while ps.is_running() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not ps.is_running(), f"the daemon did not stop at {failpoint}"
    ps.stop()
    ps.start()
    assert not ps.temp_files(), f"temporary files after a crash at {failpoint}: {ps.temp_files()}"
    cutoff = lsn_int(http.timeline_get(t, tl)["gc_cutoff"])
    assert h.check(from_lsn=cutoff) > 0
    # The interrupted work runs to the end now, and everything still reads back.
    http.timeline_compact(t, tl, force_l0=True, force_images=True)
    http.timeline_gc(t, tl, gc_horizon=0x200)
    h.check(from_lsn=lsn_int(http.timeline_get(t, tl)["gc_cutoff"]))
    ps.allow_errors(r"(?i)failpoint")
