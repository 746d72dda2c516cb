"""A timeline whose files are damaged is Broken on its own: the daemon
starts, its tenant and sibling timelines serve, the timeline detail shows
the reason, its reads fail naming it, and deleting it works."""

from __future__ import annotations

import pytest

from fixtures.compare import import_backup
from fixtures.libpq import ServerError
from fixtures.pagestream import GetPageResponse


def test_damaged_timeline_is_broken_and_its_siblings_serve(pageserver, small_backup):
    ps = pageserver
    http = ps.http_client()
    good = import_backup(ps, small_backup)
    bad = import_backup(ps, small_backup, tenant_id=None)
    # A second timeline of the good tenant, damaged below.
    sibling_id = "0" * 31 + "1"
    http.import_basebackup(good.tenant_id, sibling_id, str(small_backup.path))
    ps.stop()
    metadata = ps.workdir / "tenants" / good.tenant_id / "timelines" / sibling_id / "metadata"
    raw = bytearray(metadata.read_bytes())
    raw[9] ^= 0xFF
    metadata.write_bytes(bytes(raw))
    ps.allow_errors(rf"timeline {good.tenant_id}/{sibling_id} is broken")
    ps.start()

    detail = http.timeline_get(good.tenant_id, sibling_id)
    assert "Broken" in detail["state"], detail
    assert "metadata" in detail["state"]["Broken"]["reason"], detail
    listed = {t["timeline_id"]: t["state"] for t in http._json("GET", f"/v1/tenant/{good.tenant_id}/timeline")}
    assert listed[good.timeline_id] == "Active" and "Broken" in listed[sibling_id], listed
    assert http.tenant_get(good.tenant_id)["state"]["slug"] == "Active"
    assert http.metrics().value("pageserver_broken_timelines_count") == 1

    rel = max(small_backup.relations, key=small_backup.nblocks)
    for tl in (good, bad):
        with ps.pagestream(tl.tenant_id, tl.timeline_id) as c:
            assert isinstance(c.get_page(rel, 0), GetPageResponse)
    with pytest.raises(ServerError) as e:
        ps.pagestream(good.tenant_id, sibling_id)
    assert f"timeline {good.tenant_id}/{sibling_id} is broken" in e.value.message, e.value.message

    http.timeline_delete(good.tenant_id, sibling_id)
    assert http.metrics().value("pageserver_broken_timelines_count") == 0
    assert sibling_id not in {t["timeline_id"] for t in http._json("GET", f"/v1/tenant/{good.tenant_id}/timeline")}
