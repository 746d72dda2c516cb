"""Replication slots never outlive their timelines silently (issue 32): a
deleted tenant, a deleted Broken timeline and a failed bootstrap drop their
slots on the primary, or the answer, the log and
`pageserver_replication_slots_left_total` name the slot left and the SQL
that drops it. `PUT .../source` refuses a slot another timeline uses, and a
slot another timeline still uses (sources written before that refusal) is
kept when one of them is deleted."""

from __future__ import annotations

import json

import pytest

from fixtures.http import PageserverApiError
from fixtures.wal_compare import follow_primary

# The followed primary stops at teardown (or in the test).
PRIMARY_GONE = [r"replication failed: .*(Connection refused|connection closed|closed the connection|shutting down|terminating|57P0[1-3])"]
SETTINGS = {"max_replication_slots": "6", "wal_consistency_checking": "'all'"}


def connstring(pg) -> str:
    return f"postgres://postgres@127.0.0.1:{pg.port}/postgres"


def slots(pg) -> list[str]:
    return sorted(pg.psql("SELECT slot_name FROM pg_replication_slots").split())


def follow(http, pg, tenant: str, timeline: str | None = None) -> str:
    body: dict = {"source": {"connstring": connstring(pg)}}
    if timeline:
        body["new_timeline_id"] = timeline
    return http._json("POST", f"/v1/tenant/{tenant}/timeline", json=body)["timeline_id"]


def slots_left(http, cause: str) -> float:
    return http.metrics().value("pageserver_replication_slots_left_total", cause=cause)


def test_tenant_delete_drops_its_slots(pageserver, vanilla_pg):
    pg = vanilla_pg.init(SETTINGS).start()
    http, tenant, first = follow_primary(pageserver, pg, PRIMARY_GONE)
    second = follow(http, pg, tenant)
    assert slots(pg) == sorted([f"pageserver_{first}", f"pageserver_{second}"])
    answer = http._json("DELETE", f"/v1/tenant/{tenant}")
    dropped = {s["timeline_id"]: s["slot_dropped"] for s in answer["slots"]}
    assert dropped == {first: f"pageserver_{first}", second: f"pageserver_{second}"}, answer
    assert slots(pg) == []
    assert slots_left(http, "tenant_delete") == 0


def damage_metadata(ps, tenant: str, timeline: str) -> None:
    metadata = ps.workdir / "tenants" / tenant / "timelines" / timeline / "metadata"
    raw = bytearray(metadata.read_bytes())
    raw[9] ^= 0xFF
    metadata.write_bytes(bytes(raw))


def test_broken_timeline_delete_drops_its_slot_or_names_it(pageserver, vanilla_pg):
    """Two following timelines become Broken: deleting one drops its slot;
    with the primary down, deleting the other names the slot left, its
    server and the SQL, in the answer, the log and the metric."""
    pg = vanilla_pg.init(SETTINGS).start()
    ps = pageserver
    http, tenant, first = follow_primary(ps, pg, PRIMARY_GONE)
    second = follow(http, pg, tenant)
    ps.stop()
    for tl in (first, second):
        damage_metadata(ps, tenant, tl)
    ps.allow_errors(rf"timeline {tenant}/\w+ is broken", r"replication slot pageserver_\w+ on .* is left")
    ps.start()
    assert "Broken" in http.timeline_get(tenant, first)["state"]

    answer = http._json("DELETE", f"/v1/tenant/{tenant}/timeline/{first}")
    assert answer == {"slot_dropped": f"pageserver_{first}"}, answer
    assert slots(pg) == [f"pageserver_{second}"]

    pg.stop()
    answer = http._json("DELETE", f"/v1/tenant/{tenant}/timeline/{second}")
    slot = f"pageserver_{second}"
    assert answer["slot_dropped"] is None and answer["slot_left"] == slot, answer
    warning = answer["warning"]
    assert f"127.0.0.1:{pg.port}" in warning and f"SELECT pg_drop_replication_slot('{slot}')" in warning, warning
    assert ps.log_contains(f"replication slot {slot} on .* is left")
    assert slots_left(http, "timeline_delete") == 1
    pg.start()
    assert slots(pg) == [slot]


def test_failed_bootstrap_drops_its_slot_and_a_retry_works(pageserver_factory, testing_pageserver_bin, vanilla_pg):
    """The import fails in the middle of the base backup (a write error):
    the session is out of step, the slot is dropped over a new one, and the
    same request then succeeds."""
    pg = vanilla_pg.init(SETTINGS).start()
    ps = pageserver_factory.create(binary=testing_pageserver_bin).start()
    ps.allow_errors(*PRIMARY_GONE, r"failpoint io::write::err", r"HTTP request failed")
    http = ps.http_client()
    tenant = http.tenant_create()
    timeline = "0" * 31 + "7"
    http.configure_failpoints({"io::write::err": "return"})
    with pytest.raises(PageserverApiError) as e:
        follow(http, pg, tenant, timeline)
    http.configure_failpoints({"io::write::err": "off"})
    assert e.value.status == 500 and "io::write::err" in e.value.msg, e.value
    assert f"replication slot pageserver_{timeline} on the primary was dropped again" in e.value.msg, e.value
    assert slots(pg) == []
    assert not ps.log_contains("out of step")
    assert follow(http, pg, tenant, timeline) == timeline
    assert slots(pg) == [f"pageserver_{timeline}"]
    assert slots_left(http, "bootstrap_failure") == 0


def imported_timeline(http, pg, tenant: str, test_output_dir) -> str:
    """A timeline of `tenant` imported from a backup of `pg` (no source)."""
    tar = pg.basebackup_tar(test_output_dir / "bb")
    timeline = "0" * 31 + "2"
    http.import_basebackup(tenant, timeline, str(tar))
    return timeline


def test_adopting_a_slot_another_timeline_uses_is_refused(pageserver, vanilla_pg, test_output_dir):
    """The refusal names the slot and its user; a slot no one uses is
    adopted (recorded as such) and dropped with the adopter."""
    pg = vanilla_pg.init(SETTINGS).start()
    ps = pageserver
    http, owner_tenant, owner = follow_primary(ps, pg, PRIMARY_GONE)
    slot = f"pageserver_{owner}"
    pg.psql("SELECT pg_create_physical_replication_slot('spare', true)")
    tenant = http.tenant_create()
    adopter = imported_timeline(http, pg, tenant, test_output_dir)
    with pytest.raises(PageserverApiError) as e:
        http._json(
            "PUT", f"/v1/tenant/{tenant}/timeline/{adopter}/source", json={"connstring": connstring(pg), "slot": slot}
        )
    assert e.value.status == 409, e.value
    assert slot in e.value.msg and f"{owner_tenant}/{owner}" in e.value.msg, e.value.msg
    assert http.timeline_get(tenant, adopter)["wal_source"] is None

    http._json("PUT", f"/v1/tenant/{tenant}/timeline/{adopter}/source", json={"connstring": connstring(pg), "slot": "spare"})
    source = ps.workdir / "tenants" / tenant / "timelines" / adopter / "wal_source.json"
    assert json.loads(source.read_text())["slot_origin"] == "adopted"
    owner_source = ps.workdir / "tenants" / owner_tenant / "timelines" / owner / "wal_source.json"
    assert json.loads(owner_source.read_text())["slot_origin"] == "created"
    answer = http._json("DELETE", f"/v1/tenant/{tenant}")
    assert answer == {"slots": [{"timeline_id": adopter, "slot_dropped": "spare"}]}, answer
    assert slots(pg) == [slot]


def test_a_slot_two_timelines_share_is_kept_until_the_last_goes(pageserver, vanilla_pg, test_output_dir):
    """Two timelines share a slot (as a pageserver before the refusal could
    leave them; the second source file is in the old format, without
    `slot_origin`): deleting one keeps the slot, naming the other; deleting
    the other drops it."""
    pg = vanilla_pg.init(SETTINGS).start()
    ps = pageserver
    http, owner_tenant, owner = follow_primary(ps, pg, PRIMARY_GONE)
    slot = f"pageserver_{owner}"
    tenant = http.tenant_create()
    sharer = imported_timeline(http, pg, tenant, test_output_dir)
    # Both receivers stream on the one slot: one at a time.
    ps.allow_errors(r"replication failed: ")
    ps.stop()
    tenants = ps.workdir / "tenants"
    source = json.loads((tenants / owner_tenant / "timelines" / owner / "wal_source.json").read_text())
    source.pop("slot_origin", None)
    (tenants / tenant / "timelines" / sharer / "wal_source.json").write_text(json.dumps(source))
    ps.start()
    assert http.timeline_get(tenant, sharer)["wal_source"]["slot"] == slot

    answer = http._json("DELETE", f"/v1/tenant/{tenant}/timeline/{sharer}")
    assert answer["slot_dropped"] is None and answer["slot_kept"] == slot, answer
    assert f"{owner_tenant}/{owner}" in answer["note"], answer
    assert slots(pg) == [slot]
    answer = http._json("DELETE", f"/v1/tenant/{owner_tenant}/timeline/{owner}")
    assert answer == {"slot_dropped": slot}, answer
    assert slots(pg) == []
