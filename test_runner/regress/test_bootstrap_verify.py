"""The bootstrap verifies the base backup (issue 27, item 3): a byte flipped
in transit in the BASE_BACKUP stream fails the timeline creation, naming the
file, and leaves neither a timeline nor a slot; the same bootstrap through
the same proxy without the flip succeeds."""

from __future__ import annotations

import pytest

from fixtures.http import PageserverApiError
from fixtures.tcp_proxy import TcpProxy

PRIMARY_SETTINGS = {"max_replication_slots": "4"}
# Only the table `marked` holds it: the proxy flips its first byte.
MARKER = b"flip-me-in-transit-0123456789abcdef"


def test_byte_flipped_in_base_backup_fails_bootstrap(pageserver, vanilla_pg, port_distributor):
    pg = vanilla_pg.init(PRIMARY_SETTINGS, checksums=True).start()
    pg.psql(f"CREATE TABLE marked (v text); INSERT INTO marked SELECT '{MARKER.decode()}' || g FROM generate_series(1, 2000) g")
    path = pg.psql("SELECT pg_relation_filepath('marked')")
    http = pageserver.http_client()
    tenant = http.tenant_create()
    pageserver.allow_errors(r"BASE_BACKUP verification", r"files differ from the backup manifest")

    with TcpProxy(pg.port, port_distributor.get(), flip_marker=MARKER, lifetime=120) as proxy:
        body = {"source": {"connstring": f"postgres://postgres@127.0.0.1:{proxy.port}/postgres"}}
        with pytest.raises(PageserverApiError) as e:
            http._json("POST", f"/v1/tenant/{tenant}/timeline", json=body)
        assert proxy.flipped is not None, "the marker never passed the proxy"
        err = e.value
        assert err.status >= 400, err
        assert f"'{path}' has CRC-32C" in err.msg and "the manifest says" in err.msg, err.msg
        assert _timelines(http, tenant) == [], err.msg
        assert pageserver.temp_files() == [], "the unfinished timeline's files are removed"
        assert pg.psql("SELECT count(*) FROM pg_replication_slots") == "0"

        # The proxy flips once: the same request now passes it intact.
        info = http._json("POST", f"/v1/tenant/{tenant}/timeline", json=body)
        timeline = info["timeline_id"]
        assert _timelines(http, tenant) == [timeline]
        assert pg.psql("SELECT slot_name FROM pg_replication_slots") == f"pageserver_{timeline}"
        assert pageserver.log_contains(r"base backup verified: \d+ files, .*; [1-9]\d* relation page checksums checked")
        http.timeline_delete(tenant, timeline)


def _timelines(http, tenant: str) -> list[str]:
    return [t["timeline_id"] for t in http._json("GET", f"/v1/tenant/{tenant}/timeline")]
