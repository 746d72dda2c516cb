"""Remote storage that loses objects behind the pageserver's back, with a
real MinIO (issue 27, item 4):

- the bucket is deleted and re-created empty under a running pageserver
  that follows a primary: `remote_consistent_lsn` does not advance until
  every object the uploaded index lists is in the bucket again (uploaded
  again from the local layers), the generation claim is written again,
  and another pageserver that attaches the tenant serves every page the
  first one served;
- an attach whose index lists an object the bucket lacks is refused with
  503 naming the object, leaves nothing behind, and succeeds once the
  object is back;
- a layer lost from the bucket after it was evicted (neither in the bucket
  nor on local disk) is shown as lost in the timeline detail
  (`remote_state: incomplete`) and `pageserver_remote_lost_objects`, logged
  once while the index is checked every `check_period`, and the timeline is
  complete again once the object is restored.
"""

from __future__ import annotations

import re
import time

import pytest

from fixtures.compare import compare_all, import_backup
from fixtures.http import PageserverApiError
from fixtures.pagestream import lsn_to_str, parse_lsn
from fixtures.remote import (
    PREFIX,
    UPLOAD_RETRY,
    gen_suffix,
    largest_uploaded_layer,
    layer_keys,
    local_layers,
    newest_index,
    remote_pageserver,
    served_differences,
    timeline_objects,
    wait_attached,
    wait_uploaded,
)
from fixtures.utils import wait_until
from fixtures.wal_compare import follow_primary
from test_remote_storage import SLOT_BUSY, record_at_checkpoint
from test_wal_ingest import PRIMARY_GONE, PRIMARY_SETTINGS, checkpoint_lsn, wait_for_lsn

# The upload queue's and the periodic check's warnings about the loss.
LOSS_FOUND = r"missing from S3 bucket"
CLAIM_REWRITTEN = r"the claim of generation \d+ of tenant \S+ was missing: written again"
# The one line that says a layer is lost (evicted, then lost from the bucket).
LOST = r"objects its uploaded index lists are lost: missing from S3 bucket"
# Eviction cannot meet the budget while the import's layers are not uploaded.
OVER_BUDGET = r"over the disk budget: \d+ bytes to free, \d+ freed \(nothing else is evictable\)"
# While the bucket does not exist, every request fails.
NO_BUCKET = r"(NoSuchBucket|bucket does not exist)"


@pytest.fixture
def primary(vanilla_pg):
    return vanilla_pg.init({**PRIMARY_SETTINGS, "autovacuum": "off"}).start()


def drop_bucket(minio) -> None:
    """Deletes every object of the test bucket, then the bucket."""
    s3 = minio.client()
    for key in minio.list_keys(minio.bucket):
        s3.delete_object(Bucket=minio.bucket, Key=key)
    s3.delete_bucket(Bucket=minio.bucket)


def missing_keys(minio, tenant: str, timeline: str, index: dict) -> list[str]:
    have = set(timeline_objects(minio, tenant, timeline))
    return sorted(k for k in layer_keys(index, tenant, timeline).values() if k not in have)


def flushed_layer(pg, http, tenant: str, timeline: str, table: str) -> None:
    """A table written on the primary, ingested and flushed to a layer."""
    pg.psql(f"CREATE TABLE {table} AS SELECT g, md5(g::text) FROM generate_series(1, 20000) g")
    wait_for_lsn(http, tenant, timeline, checkpoint_lsn(pg))
    http.timeline_checkpoint(tenant, timeline)


def test_lost_bucket_is_uploaded_again(pageserver_factory, minio, primary):
    pg = primary
    ps1 = remote_pageserver(pageserver_factory, minio, "ps1")
    ps1.allow_errors(LOSS_FOUND, UPLOAD_RETRY, CLAIM_REWRITTEN, NO_BUCKET)
    http1, tenant, tl = follow_primary(ps1, pg, PRIMARY_GONE)
    for i in range(3):
        flushed_layer(pg, http1, tenant, tl, f"before_loss_{i}")
    before = parse_lsn(wait_uploaded(http1, tenant, tl)["remote_consistent_lsn"])
    old_layers = set(newest_index(minio, tenant, tl)["layers"])
    assert len(old_layers) >= 3, old_layers

    drop_bucket(minio)
    minio.create_bucket(minio.bucket)
    flushed_layer(pg, http1, tenant, tl, "after_loss")
    disk = parse_lsn(http1.timeline_get(tenant, tl)["disk_consistent_lsn"])
    assert disk > before

    # Whenever remote_consistent_lsn has moved past the loss, everything the
    # newest index lists is in the bucket (uploads come before the advance).
    deadline = time.monotonic() + 30
    while True:
        remote = parse_lsn(http1.timeline_get(tenant, tl)["remote_consistent_lsn"])
        if remote > before:
            index = newest_index(minio, tenant, tl)
            gone = missing_keys(minio, tenant, tl, index)
            assert not gone, f"remote_consistent_lsn {lsn_to_str(remote)} while the bucket lacks {gone}"
            if remote >= disk:
                break
        assert time.monotonic() < deadline, f"remote_consistent_lsn stuck at {lsn_to_str(remote)}, want {lsn_to_str(disk)}"
        time.sleep(0.05)
    claim = f"{PREFIX}/tenants/{tenant}/generations/{gen_suffix(1)}"
    assert claim in minio.list_keys(minio.bucket, f"{PREFIX}/tenants/{tenant}/generations/"), "claim not restored"
    assert http1.metrics().value("pageserver_remote_missing_objects_found_total") > 0
    assert http1.metrics().value("pageserver_remote_missing_objects") == 0
    detail = http1.timeline_get(tenant, tl)
    assert detail["remote_state"] == "complete" and detail["remote_missing_objects"] == 0, detail

    # Everything ps1 serves is served by a pageserver attaching from the bucket.
    rec = record_at_checkpoint(ps1, tenant, tl, pg, "after the re-upload")
    http1.timeline_checkpoint(tenant, tl)
    wait_uploaded(http1, tenant, tl, lsn=rec.lsn)
    ps1.kill()
    ps2 = remote_pageserver(pageserver_factory, minio, "ps2")
    ps2.allow_errors(*PRIMARY_GONE, SLOT_BUSY)
    http2 = ps2.http_client()
    http2.tenant_attach(tenant, 2)
    attached = wait_attached(http2, tenant, tl)
    assert parse_lsn(attached["disk_consistent_lsn"]) >= rec.lsn, attached
    diffs = served_differences(ps2, tenant, tl, rec)
    assert not diffs, f"{len(diffs)} differences after the attach:\n" + "\n".join(diffs[:40])


def test_attach_refuses_an_index_with_missing_objects(pageserver_factory, minio, small_backup):
    ps1 = remote_pageserver(pageserver_factory, minio, "ps1")
    tl = import_backup(ps1, small_backup)
    t, tlid = tl.tenant_id, tl.timeline_id
    wait_uploaded(ps1.http_client(), t, tlid)
    ps1.stop()

    layer = largest_uploaded_layer(minio, t, tlid)
    victim, key, original = layer.name, layer.key, layer.data
    minio.delete(minio.bucket, key)

    ps2 = remote_pageserver(pageserver_factory, minio, "ps2")
    ps2.allow_errors(re.escape(victim))
    http2 = ps2.http_client()
    with pytest.raises(PageserverApiError) as e:
        http2.tenant_attach(t, 2)
    # 503: nothing in the request is wrong, and the same request succeeds
    # once the object is back (docs/http-api.md).
    assert e.value.status == 503 and key in e.value.msg and "1 objects" in e.value.msg, e.value
    with pytest.raises(PageserverApiError) as e:
        http2.tenant_get(t)
    assert e.value.status == 404, e.value
    assert not (ps2.workdir / "tenants" / t).exists(), "a refused attach left a tenant directory"

    minio.put(minio.bucket, key, original)
    http2.tenant_attach(t, 2)
    wait_attached(http2, t, tlid)
    compare_all(ps2, tl, small_backup)


def test_lost_evicted_layer_is_shown_logged_once_and_cleared_when_restored(pageserver_factory, minio, small_backup):
    ps = remote_pageserver(
        pageserver_factory, minio, "ps", storage={"check_period": "200 ms"},
        disk_usage_based_eviction={"max_resident_bytes": "1 KiB", "period": "200 ms"},
    )  # fmt: skip
    ps.allow_errors(OVER_BUDGET, LOST)
    http = ps.http_client()
    tl = import_backup(ps, small_backup)
    t, tlid = tl.tenant_id, tl.timeline_id
    wait_uploaded(http, t, tlid)
    index = newest_index(minio, t, tlid)
    keys = layer_keys(index, t, tlid)

    def evicted() -> str:
        gone = sorted(set(index["layers"]) - set(local_layers(ps, t, tlid)))
        assert gone, "nothing evicted yet"
        return gone[0]

    name = wait_until(evicted, timeout=10, what="an evicted layer")
    key = keys[name]
    original = minio.get(minio.bucket, key)
    minio.delete(minio.bucket, key)

    def shown_lost() -> dict:
        d = http.timeline_get(t, tlid)
        assert d["remote_state"] == "incomplete", d
        return d

    detail = wait_until(shown_lost, timeout=10, what="the lost layer in the timeline detail")
    assert (detail["remote_missing_objects"], detail["remote_lost_objects"]) == (1, 1), detail
    assert detail["remote_missing"] == [{"key": key, "recoverable": False}], detail
    assert http.metrics().value("pageserver_remote_lost_objects") == 1
    remote_lsn = detail["remote_consistent_lsn"]
    # Checked every 200 ms meanwhile: still lost, said once, not per retry.
    time.sleep(0.6)
    detail = http.timeline_get(t, tlid)
    assert detail["remote_state"] == "incomplete" and detail["remote_consistent_lsn"] == remote_lsn, detail
    lost_lines = [line for line in ps.log_lines() if re.search(LOST, line)]
    assert len(lost_lines) == 1 and key in lost_lines[0], lost_lines
    assert not ps.log_contains(UPLOAD_RETRY), ps.log_contains(UPLOAD_RETRY)

    # Restored into the bucket: complete at the next check.
    minio.put(minio.bucket, key, original)

    def complete() -> dict:
        d = http.timeline_get(t, tlid)
        assert d["remote_state"] == "complete" and d["remote_missing"] == [], d
        return d

    wait_until(complete, timeout=5, what="the timeline complete after the restore")
    assert http.metrics().value("pageserver_remote_lost_objects") == 0
