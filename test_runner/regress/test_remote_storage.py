"""Remote storage end to end, with real PostgreSQL primaries, a real MinIO
and real pageservers sharing one bucket:

- a pageserver that loses its disk is replaced by another one that
  attaches the tenant from the bucket (generation 2) and serves, at every
  LSN the first one served, exactly the same answers, then goes on
  following the primary;
- while the store is down, ingest goes on up to the upload queue bound,
  then waits; once the store is back everything is uploaded and nothing is
  lost (pages checked against the primary, here and after an attach
  elsewhere);
- a layer object overwritten with garbage is an error naming the object,
  never wrong data, and reads work again once the object is repaired;
- split brain: a stale attachment that keeps ingesting, compacting and
  collecting garbage never deletes what the newer attachment's index lists
  and never writes an object of the newer generation; a stale attach is 409;
- evicted layers are downloaded again on demand;
- detach and attach again; location_config without remote storage is 400.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import tarfile
import time

import pytest

from fixtures.compare import ImportedTimeline, compare_all, import_backup
from fixtures.http import PageserverApiError
from fixtures.libpq import ServerError
from fixtures.pagestream import GetPageResponse, lsn_to_str, parse_lsn
from fixtures.remote import (
    UPLOAD_RETRY,
    gen_suffix,
    key_of,
    largest_uploaded_layer,
    layer_keys,
    layers_holding,
    local_layers,
    newest_index,
    read_index,
    record_served,
    remote_pageserver,
    served_differences,
    timeline_objects,
    wait_attached,
    wait_uploaded,
)
from fixtures.utils import fmt_lsn, wait_until
from fixtures.wal_compare import compare_with_primary, follow_primary
from test_compaction import MANUAL, History
from test_wal_ingest import PRIMARY_GONE, PRIMARY_SETTINGS, WORKLOAD, assert_matches, checkpoint_lsn, wait_for_lsn

# Autovacuum off: the primary's files change only by the test's own writes
# between a checkpoint and the comparison at its LSN.
PRIMARY = {**PRIMARY_SETTINGS, "wal_compression": "zstd", "autovacuum": "off"}
# A pageserver that attaches a followed timeline may connect while the
# primary's walsender of the killed one still holds the slot.
SLOT_BUSY = r"replication failed: .*replication slot \S+ is active for PID"
MIB = 1 << 20


@pytest.fixture
def primary(vanilla_pg):
    return vanilla_pg.init(PRIMARY).start()


def slot_restart_lsn(pg, timeline: str) -> int:
    return parse_lsn(pg.psql(f"SELECT restart_lsn FROM pg_replication_slots WHERE slot_name = 'pageserver_{timeline}'"))


def record_at_checkpoint(ps, tenant: str, timeline: str, pg, what: str):
    """Checkpoints the primary; at that LSN checks `ps` against the
    primary's files, then records everything `ps` serves there."""
    lsn = checkpoint_lsn(pg)
    wait_for_lsn(ps.http_client(), tenant, timeline, lsn)
    res = compare_with_primary(ps, tenant, timeline, pg, lsn)
    assert not res.mismatches, f"{what}: {len(res.mismatches)} mismatches:\n" + "\n".join(res.mismatches[:40])
    rec = record_served(ps, tenant, timeline, pg.datadir, lsn)
    assert rec.pages > 1000 and rec.slru, f"{what}: only {rec.pages} pages recorded"
    return rec


def test_attach_after_losing_the_disk(pageserver_factory, minio, primary):
    pg = primary
    # No idle flush: the last recording stays in memory only, above the
    # uploaded LSN, so the second pageserver must take it from the primary.
    ps1 = remote_pageserver(pageserver_factory, minio, "ps1", wal_receiver_idle_flush="10 m")
    http1, tenant, tl = follow_primary(ps1, pg, PRIMARY_GONE)
    assert http1.tenant_get(tenant)["generation"] == 1

    pg.pgbench_init(1)
    recorded = [record_at_checkpoint(ps1, tenant, tl, pg, "after pgbench -i")]
    for sql in WORKLOAD:
        pg.psql(sql)
    pg.run("pgbench", "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres", "-c", "2", "-T", "2", "postgres")
    recorded.append(record_at_checkpoint(ps1, tenant, tl, pg, "after DDL and pgbench"))
    http1.timeline_checkpoint(tenant, tl)
    info = wait_uploaded(http1, tenant, tl)
    uploaded = parse_lsn(info["remote_consistent_lsn"])
    assert uploaded >= recorded[-1].lsn, info
    pg.psql("UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid % 10 = 0")
    recorded.append(record_at_checkpoint(ps1, tenant, tl, pg, "after an update not uploaded"))
    assert parse_lsn(http1.timeline_get(tenant, tl)["remote_consistent_lsn"]) < recorded[-1].lsn
    # The primary keeps the WAL of everything not in the bucket.
    assert slot_restart_lsn(pg, tl) <= uploaded

    ps1.kill()
    shutil.rmtree(ps1.workdir)

    ps2 = remote_pageserver(pageserver_factory, minio, "ps2")
    ps2.allow_errors(*PRIMARY_GONE, SLOT_BUSY)
    http2 = ps2.http_client()
    http2.tenant_attach(tenant, 2)
    assert http2.tenant_get(tenant)["generation"] == 2
    attached = wait_attached(http2, tenant, tl)
    assert parse_lsn(attached["disk_consistent_lsn"]) >= uploaded, attached
    wait_for_lsn(http2, tenant, tl, recorded[-1].lsn)
    for rec in recorded:
        diffs = served_differences(ps2, tenant, tl, rec)
        assert not diffs, f"at {lsn_to_str(rec.lsn)} ({rec.pages} pages): {len(diffs)} differences:\n" + "\n".join(diffs[:40])

    # Ingest goes on from the same primary, and uploads carry generation 2.
    pg.psql("CREATE TABLE after_attach AS SELECT g, md5(g::text) FROM generate_series(1, 20000) g")
    pg.run("pgbench", "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres", "-c", "2", "-T", "2", "postgres")
    assert_matches(ps2, tenant, tl, pg, "new rows after the attach")
    http2.timeline_checkpoint(tenant, tl)
    wait_uploaded(http2, tenant, tl)
    index = read_index(minio, tenant, tl, 2)
    assert index["generation"] == 2
    assert any(layer["generation"] == 2 for layer in index["layers"].values()), "no layer uploaded by generation 2"


QUEUE_BYTES = 1 * MIB
DISTANCE_BYTES = 1 * MIB
MAX_FROZEN_LAYERS = 4  # pageserver/src/tenant/timeline/writer.rs
QUEUE_FULL = r"upload queue of \S+ is full"


def insert_batch(pg) -> int:
    """1,000 rows more in `w`; returns the primary's insert LSN after them."""
    pg.psql("INSERT INTO w SELECT g, md5(g::text) FROM generate_series(1, 1000) g")
    return parse_lsn(pg.psql("SELECT pg_current_wal_insert_lsn()"))


def write_until_ingest_stalls(pg, http, tenant: str, timeline: str, timeout: float = 45.0) -> tuple[int, int]:
    """Inserts batches on the primary until ingest is held back: the
    upload queue over its bound (the flush waits), the frozen layers at
    their limit (ingest waits), last_record_lsn unchanged over three
    batches and the primary 4 MiB or more ahead. Returns (last_record_lsn,
    primary LSN)."""
    deadline = time.monotonic() + timeout
    prev, unchanged = -1, 0
    while True:
        primary_lsn = insert_batch(pg)
        info = http.timeline_get(tenant, timeline)
        ingested = parse_lsn(info["last_record_lsn"])
        unchanged = unchanged + 1 if ingested == prev else 0
        prev = ingested
        queued = http.metrics().value("pageserver_remote_upload_queue_bytes")
        held = queued > QUEUE_BYTES and info["in_memory_layers"] >= MAX_FROZEN_LAYERS
        if held and unchanged >= 3 and primary_lsn - ingested >= 4 * MIB:
            return ingested, primary_lsn
        assert time.monotonic() < deadline, (
            f"ingest not held back: at {lsn_to_str(ingested)}, primary at {lsn_to_str(primary_lsn)}, "
            f"{queued} bytes queued, {info['in_memory_layers']} in-memory layers"
        )


def test_store_outage_holds_ingest_at_the_queue_bound(pageserver_factory, minio, primary):
    pg = primary
    ps1 = remote_pageserver(
        pageserver_factory, minio, "ps1", storage={"upload_queue_size": "1 MiB"},
        checkpoint_distance="1 MiB", compaction_period="0 s",
    )  # fmt: skip
    http, tenant, tl = follow_primary(ps1, pg, PRIMARY_GONE)
    ps1.allow_errors(UPLOAD_RETRY, QUEUE_FULL)
    pg.psql("CREATE TABLE w (id int, v text)")
    wait_for_lsn(http, tenant, tl, checkpoint_lsn(pg))
    http.timeline_checkpoint(tenant, tl)
    wait_uploaded(http, tenant, tl)

    minio.stop()
    ingested, primary_lsn = write_until_ingest_stalls(pg, http, tenant, tl)
    stalled_seen = time.monotonic()
    assert ps1.log_contains(QUEUE_FULL), "the stalled flush did not say why"
    m = http.metrics()
    pending = m.value("pageserver_remote_upload_queue_bytes")
    # A flush waits once more than the bound is queued: one layer over at most.
    assert QUEUE_BYTES < pending <= QUEUE_BYTES + 2 * DISTANCE_BYTES, f"{pending} bytes queued"
    info = http.timeline_get(tenant, tl)
    assert info["in_memory_layers"] <= MAX_FROZEN_LAYERS + 1, info
    assert m.value("pageserver_ingest_backpressure_waits_total") > 0
    assert m.value("pageserver_remote_operation_errors_total", op_kind="upload") > 0
    assert parse_lsn(info["remote_consistent_lsn"]) < ingested
    # The primary writes on; the pageserver stays where it is.
    for _ in range(3):
        assert insert_batch(pg) > primary_lsn
    assert parse_lsn(http.timeline_get(tenant, tl)["last_record_lsn"]) == ingested

    minio.start()
    restarted = time.monotonic()
    end = checkpoint_lsn(pg)
    wait_for_lsn(http, tenant, tl, end, timeout=120)
    http.timeline_checkpoint(tenant, tl)
    wait_uploaded(http, tenant, tl, lsn=end)
    waited_us = http.metrics().value("pageserver_remote_upload_queue_wait_microseconds_total")
    # The flush waited from before the stall was seen until after the restart.
    assert waited_us >= (restarted - stalled_seen) * 1e6, waited_us
    assert_matches(ps1, tenant, tl, pg, "after the outage")

    # The bucket alone has it all: attach elsewhere from it.
    final = checkpoint_lsn(pg)
    wait_for_lsn(http, tenant, tl, final)
    http.timeline_checkpoint(tenant, tl)
    wait_uploaded(http, tenant, tl, lsn=final)
    ps1.kill()
    ps2 = remote_pageserver(pageserver_factory, minio, "ps2")
    ps2.allow_errors(*PRIMARY_GONE, SLOT_BUSY)
    http2 = ps2.http_client()
    http2.tenant_attach(tenant, 2)
    attached = wait_attached(http2, tenant, tl)
    assert parse_lsn(attached["disk_consistent_lsn"]) >= final, attached
    res = compare_with_primary(ps2, tenant, tl, pg, final)
    assert res.pages > 100 and not res.mismatches, f"{len(res.mismatches)} mismatches:\n" + "\n".join(res.mismatches[:40])


def read_probe(ps, tl: ImportedTimeline, backup, pages: list) -> list[str]:
    """Reads `pages` ((rel, blkno) of the backup) one by one: every page
    served must be the backup's; returns the error messages (a fresh
    session after an error, in case the daemon ended the old one)."""
    expected = {}
    with tarfile.open(backup.path) as tar:
        for rel in {r for r, _ in pages}:
            for blkno, page in backup.read_blocks(tar, rel):
                expected[(rel, blkno)] = page
    errors = []
    for rel, blkno in pages:
        try:
            with ps.pagestream(tl.tenant_id, tl.timeline_id) as c:
                resp = c.get_page(rel, blkno)
        except (ServerError, EOFError) as e:
            errors.append(str(e))
            continue
        if isinstance(resp, GetPageResponse):
            assert resp.page == expected[(rel, blkno)], f"{rel} blk {blkno}: wrong data served"
        else:
            errors.append(resp.message)
    return errors


@pytest.mark.parametrize("damage", ["same_size", "other_size"])
def test_corrupt_layer_object(pageserver_factory, minio, small_backup, damage):
    ps1 = remote_pageserver(pageserver_factory, minio, "ps1")
    tl = import_backup(ps1, small_backup)
    t, tlid = tl.tenant_id, tl.timeline_id
    wait_uploaded(ps1.http_client(), t, tlid)
    ps1.stop()

    layer = largest_uploaded_layer(minio, t, tlid)
    index, victim, key, original = layer.index, layer.name, layer.key, layer.data
    rng = random.Random(damage)
    garbage = rng.randbytes(len(original) if damage == "same_size" else len(original) // 2 + 1)
    minio.put(minio.bucket, key, garbage)

    ps2 = remote_pageserver(pageserver_factory, minio, "ps2")
    # Download retries, the failed prefetch and the failed reads name the layer.
    ps2.allow_errors(re.escape(victim))
    http2 = ps2.http_client()
    http2.tenant_attach(t, 2)
    wait_attached(http2, t, tlid)
    in_victim = [
        (rel, b)
        for rel in sorted(small_backup.relations)
        for b in range(small_backup.nblocks(rel))
        if victim in layers_holding(index, key_of(rel, b))
    ]
    assert in_victim, f"no page of the backup falls in {victim}"
    errors = read_probe(ps2, tl, small_backup, in_victim[:: max(1, len(in_victim) // 4)][:4])
    assert errors, f"reads of pages in the corrupt {victim} all succeeded"
    object_name = f"{victim}-{gen_suffix(1)}"
    for msg in errors:
        assert object_name in msg, f"the error does not name the object {object_name}: {msg}"

    minio.put(minio.bucket, key, original)
    compare_all(ps2, tl, small_backup)


def check_up_to(h: History, http, upto: int) -> int:
    """Every key at every written LSN at or below `upto`, through `http`."""
    reads = 0
    for lsn in [x for x in h.lsns() if x <= upto]:
        for k in h.keys:
            want = h.expected(k, lsn)
            if want is None:
                continue
            got = http.testing_get(h.tenant, h.timeline, k, fmt_lsn(lsn))
            assert got == want, f"key {k} at {fmt_lsn(lsn)}: served {got[:16].hex()}..., wrote {want[:16].hex()}..."
            reads += 1
    return reads


@pytest.mark.failpoints
def test_split_brain_generations(pageserver_factory, minio, testing_pageserver_bin):
    overrides = {**MANUAL, "compaction_threshold": 3, "image_creation_threshold": 1,
                 "compaction_target_size": "64 KiB", "binary": testing_pageserver_bin}
    storage = {"deletion_delay": "1 s"}
    a = remote_pageserver(pageserver_factory, minio, "a", storage, **overrides)
    http_a = a.http_client()
    t = http_a.tenant_create()
    tl = http_a.timeline_create(t)["timeline_id"]
    assert http_a.tenant_get(t)["generation"] == 1
    h = History(http_a, t, tl)
    h.write_rounds(4)
    http_a.timeline_compact(t, tl)
    h.write_rounds(3)
    attach_lsn = parse_lsn(wait_uploaded(http_a, t, tl)["remote_consistent_lsn"])

    b = remote_pageserver(pageserver_factory, minio, "b", storage, **overrides)
    http_b = b.http_client()
    http_b.tenant_attach(t, 2)
    assert parse_lsn(wait_attached(http_b, t, tl)["last_record_lsn"]) == attach_lsn
    b_index = read_index(minio, t, tl, 1)  # A is idle: the index B attached from
    assert parse_lsn(b_index["disk_consistent_lsn"]) == attach_lsn
    b_objects = set(layer_keys(b_index, t, tl).values())
    before = set(timeline_objects(minio, t, tl))

    # A goes on as if nothing happened: ingest, compaction with images, GC.
    for _ in range(3):
        h.write_rounds(3)
        http_a.timeline_compact(t, tl, force_l0=True, force_images=True)
        http_a.timeline_gc(t, tl, gc_horizon=0)
    wait_uploaded(http_a, t, tl)

    def deletions_skipped():
        assert a.log_contains(r"generation 2 of tenant \S+ is attached elsewhere: not deleting"), "no deletion pass yet"

    wait_until(deletions_skipped, timeout=30, what="A's delayed deletions to come due")
    now = set(timeline_objects(minio, t, tl))
    missing = sorted(b_objects - now)
    assert not missing, f"objects B's index lists were deleted: {missing}"
    written_by_a = sorted(now - before)
    assert written_by_a, "A uploaded nothing after B attached"
    b_index_key = f"index_part.json-{gen_suffix(2)}"
    foreign = [k for k in written_by_a if not k.endswith(gen_suffix(1)) and not k.endswith(b_index_key)]
    assert not foreign, f"objects of another generation than A's: {foreign}"
    if any(k.endswith(b_index_key) for k in now):
        assert parse_lsn(read_index(minio, t, tl, 2)["disk_consistent_lsn"]) == attach_lsn, "B's index was overwritten"
    assert parse_lsn(http_b.timeline_get(t, tl)["last_record_lsn"]) == attach_lsn
    assert check_up_to(h, http_b, attach_lsn) > 0

    c = remote_pageserver(pageserver_factory, minio, "c")
    c.allow_errors(r"generation 1 is stale")
    with pytest.raises(PageserverApiError) as e:
        c.http_client().tenant_attach(t, 1)
    assert e.value.status == 409 and "generation 2" in e.value.msg, e.value


def wait_index_lists_all(minio, http, tenant: str, timeline: str, timeout: float = 30.0) -> dict:
    """Waits until the newest index in the bucket lists as many layers as
    the timeline has (after a compaction: its L1s, not the L0s); returns it."""
    def listed():
        info = http.timeline_get(tenant, timeline)
        count = info["l0_layers"] + info["l1_layers"] + info["image_layers"]
        index = newest_index(minio, tenant, timeline)
        assert len(index["layers"]) == count, f"the index lists {len(index['layers'])} layers, the timeline has {count}"
        return index

    return wait_until(listed, timeout=timeout, what="the index to list every layer")


def test_eviction_and_download_on_demand(pageserver_factory, minio, small_backup):
    budget = 1 * MIB
    ps = remote_pageserver(
        pageserver_factory, minio, "ps", compaction_period="0 s", compaction_target_size="2 MiB",
        disk_usage_based_eviction={"max_resident_bytes": "1 MiB", "period": "1 s"},
    )  # fmt: skip
    # Layers not uploaded yet (the import's, then the compaction's) cannot
    # be evicted: until they are, the budget cannot be met.
    ps.allow_errors(r"over the disk budget: \d+ bytes to free, \d+ freed \(nothing else is evictable\)")
    http = ps.http_client()
    tl = import_backup(ps, small_backup)
    t, tlid = tl.tenant_id, tl.timeline_id
    # L1s of 2 MiB: many layers, each over the budget alone.
    report = http.timeline_compact(t, tlid, force_l0=True)
    assert report["l1_layers_written"] >= 4, report
    index = wait_index_lists_all(minio, http, t, tlid)
    layers = len(index["layers"])

    def evicted() -> set[str]:
        resident = local_layers(ps, t, tlid)
        assert sum(resident.values()) <= budget, f"{sum(resident.values())} bytes of layers resident"
        gone = set(index["layers"]) - set(resident)
        m = http.metrics()
        assert m.value("pageserver_layer_evictions_total") >= len(gone) >= layers - 1, f"{len(gone)} evicted"
        assert m.value("pageserver_resident_physical_size") <= budget
        return gone

    gone = wait_until(evicted, timeout=30, what="eviction down to max_resident_bytes")
    downloads = "pageserver_remote_operation_seconds_count"
    before = http.metrics().value_or(downloads, 0, file_kind="layer", op_kind="download")
    compare_all(ps, tl, small_backup)
    after = http.metrics().value(downloads, file_kind="layer", op_kind="download")
    assert after - before >= len(gone), f"{after - before} downloads to read {len(gone)} evicted layers"
    wait_until(evicted, timeout=30, what="eviction after the reads")


def test_detach_then_attach_again(pageserver_factory, minio, small_backup):
    ps = remote_pageserver(pageserver_factory, minio, "ps")
    http = ps.http_client()
    tl = import_backup(ps, small_backup)
    t, tlid = tl.tenant_id, tl.timeline_id
    info = http.timeline_get(t, tlid)
    # No wait for the upload: detach waits for it.
    http.tenant_detach(t)
    index = newest_index(minio, t, tlid)
    assert index["generation"] == 1
    assert parse_lsn(index["disk_consistent_lsn"]) == parse_lsn(info["disk_consistent_lsn"]), index
    assert not (ps.workdir / "tenants" / t).exists(), "detach left the local copy"
    with pytest.raises(PageserverApiError) as e:
        http.tenant_get(t)
    assert e.value.status == 404

    http.tenant_attach(t, 2)
    assert http.tenant_get(t)["generation"] == 2
    again = wait_attached(http, t, tlid)
    assert again["last_record_lsn"] == info["last_record_lsn"]
    compare_all(ps, tl, small_backup)


def test_location_config_needs_remote_storage(pageserver):
    http = pageserver.http_client()
    with pytest.raises(PageserverApiError) as e:
        http.tenant_attach(os.urandom(16).hex(), 1)
    assert e.value.status == 400 and "remote_storage" in e.value.msg, e.value
    tenant = http.tenant_create()
    with pytest.raises(PageserverApiError) as e:
        http.tenant_detach(tenant)
    assert e.value.status == 400 and "remote_storage" in e.value.msg, e.value
    assert http.tenant_get(tenant)["generation"] is None
