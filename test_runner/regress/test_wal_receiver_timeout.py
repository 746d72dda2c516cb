"""The WAL receiver notices a primary that went silent (`wal_receiver_timeout`)
and a flush that keeps failing, and shows both in the timeline detail
(`wal_source.state`, `last_error`, `last_message_age_ms`)."""

from __future__ import annotations

import time

import pytest

from fixtures.pagestream import parse_lsn
from fixtures.tcp_proxy import TcpProxy
from fixtures.wal_compare import compare_with_primary

PRIMARY_SETTINGS = {"max_replication_slots": "4", "wal_level": "replica"}
STALLED = r"no (message|answer) from the primary .*\(wal_receiver_timeout\); reconnecting"
# The primary's walsender of the dropped connection holds the slot until it
# sees the connection close (after the proxy forwards again).
SLOT_BUSY = r"replication failed: .*is active for PID"


def follow(ps, port: int) -> tuple:
    http = ps.http_client()
    tenant = http.tenant_create()
    body = {"source": {"connstring": f"postgres://postgres@127.0.0.1:{port}/postgres"}}
    timeline = http._json("POST", f"/v1/tenant/{tenant}/timeline", json=body)["timeline_id"]
    return http, tenant, timeline


def wait_for(http, tenant: str, timeline: str, what: str, ok, timeout: float = 30) -> dict:
    """The timeline detail once `ok(detail)` holds."""
    deadline = time.monotonic() + timeout
    while True:
        info = http.timeline_get(tenant, timeline)
        if ok(info):
            return info
        assert time.monotonic() < deadline, f"not {what} after {timeout} s: {info['wal_source']}"
        time.sleep(0.05)


def caught_up(http, tenant: str, timeline: str, pg) -> dict:
    lsn = parse_lsn(pg.psql("SELECT pg_current_wal_insert_lsn()"))
    return wait_for(
        http, tenant, timeline, f"ingested to {lsn:X}", lambda i: parse_lsn(i["last_record_lsn"]) >= lsn
    )


def state(want: str):
    return lambda info: info["wal_source"]["state"] == want


def test_stalled_stream_is_dropped_and_resumed(pageserver_factory, vanilla_pg, port_distributor):
    pg = vanilla_pg.init(PRIMARY_SETTINGS).start()
    ps = pageserver_factory.create(overrides={"wal_receiver_timeout": "2 s"}).start()
    ps.allow_errors(STALLED, SLOT_BUSY)
    with TcpProxy(pg.port, port_distributor.get(), lifetime=120) as proxy:
        http, tenant, timeline = follow(ps, proxy.port)
        pg.psql("CREATE TABLE s (id int, v text); INSERT INTO s SELECT g, md5(g::text) FROM generate_series(1, 1000) g")
        caught_up(http, tenant, timeline, pg)

        # Idle but healthy: PostgreSQL's own keepalives come every 30 s
        # (wal_sender_timeout / 2), but the receiver asks for one at 1 s.
        time.sleep(2.5)
        src = http.timeline_get(tenant, timeline)["wal_source"]
        assert src["state"] == "streaming" and src["last_message_age_ms"] < 2000, src
        assert http.metrics().value("pageserver_wal_receiver_stalls_total") == 0

        proxy.stall()
        pg.psql("INSERT INTO s SELECT g, md5(g::text) FROM generate_series(1001, 5000) g")
        src = wait_for(http, tenant, timeline, "stalled", state("stalled"), timeout=10)["wal_source"]
        assert "wal_receiver_timeout" in src["last_error"], src
        assert src["last_message_age_ms"] >= 1900, src
        # It stays `stalled` through reconnects while the primary cannot be heard.
        time.sleep(3)
        info = http.timeline_get(tenant, timeline)
        assert info["wal_source"]["state"] == "stalled", info["wal_source"]
        assert info["wal_source"]["last_message_age_ms"] >= 4000, info["wal_source"]
        assert parse_lsn(info["last_record_lsn"]) < parse_lsn(pg.psql("SELECT pg_current_wal_insert_lsn()"))
        assert http.metrics().value("pageserver_wal_receiver_stalls_total") >= 2

        proxy.unstall()
        pg.psql("CHECKPOINT")
        info = caught_up(http, tenant, timeline, pg)
        wait_for(http, tenant, timeline, "streaming", state("streaming"))
        res = compare_with_primary(ps, tenant, timeline, pg, parse_lsn(info["last_record_lsn"]))
        assert res.pages > 100 and not res.mismatches, res.mismatches[:20]
        http.timeline_delete(tenant, timeline)  # while the proxy still forwards


@pytest.mark.failpoints
def test_failing_flush_shows_in_the_state(pageserver_factory, testing_pageserver_bin, vanilla_pg):
    pg = vanilla_pg.init(PRIMARY_SETTINGS).start()
    overrides = {"wal_receiver_idle_flush": "200 ms"}
    ps = pageserver_factory.create(binary=testing_pageserver_bin, overrides=overrides).start()
    ps.allow_errors(
        r"layer flush failed, will retry: .*flush::before-write-layer",
        r"replication failed: .*flush::before-write-layer",
    )
    http, tenant, timeline = follow(ps, pg.port)
    caught_up(http, tenant, timeline, pg)
    http.configure_failpoints({"flush::before-write-layer": "return"})
    pg.psql("CREATE TABLE f AS SELECT g FROM generate_series(1, 1000) g")
    src = wait_for(http, tenant, timeline, "flush failing", state("flush failing"), timeout=10)["wal_source"]
    assert "flushing ingested WAL to disk fails" in src["last_error"], src
    assert "flush::before-write-layer" in src["last_error"], src

    http.configure_failpoints({"flush::before-write-layer": "off"})
    info = caught_up(http, tenant, timeline, pg)
    lsn = parse_lsn(info["last_record_lsn"])
    wait_for(http, tenant, timeline, "flushed", lambda i: parse_lsn(i["disk_consistent_lsn"]) >= lsn)
    src = wait_for(http, tenant, timeline, "streaming", state("streaming"))["wal_source"]
    assert src["state"] == "streaming", src
    http.timeline_delete(tenant, timeline)  # before the primary stops at teardown
