"""HTTP API authentication (issue 32, item 3): with `http_auth_type = "jwt"`
every route but `/v1/status` and `/metrics` needs a Bearer JWT. No token, a
forged or an expired one: 401 naming why, and nothing changes. A tenant
token: its tenant's routes, 403 naming the tenant elsewhere and on the
management routes. A `pageserverapi` token: everything."""

from __future__ import annotations

import os

import pytest

from fixtures.compare import import_backup
from fixtures.http import PageserverApiError, PageserverHttpClient
from fixtures.jwt import PRIVATE_KEY_B, PUBLIC_KEY_A, pageserverapi_token, sign, tenant_token
from fixtures.pagebench import run_pagebench

JWT_OVERRIDES = {"http_auth_type": "jwt", "auth_validation_public_key_path": str(PUBLIC_KEY_A)}


def refused(client: PageserverHttpClient, method: str, path: str, **kwargs) -> tuple[int, str]:
    """(status, msg) of a request that must fail."""
    with pytest.raises(PageserverApiError) as e:
        client.request(method, path, **kwargs)
    return e.value.status, e.value.msg


def test_http_api_needs_a_token_of_the_right_scope(pageserver_factory, small_backup):
    ps = pageserver_factory.create(overrides=JWT_OVERRIDES)
    ps.http_auth_token = pageserverapi_token()
    ps.start()
    admin = ps.http_client()
    a = import_backup(ps, small_backup)
    b = admin.tenant_create()
    b_timeline = admin.timeline_create(b)["timeline_id"]
    tl = f"/v1/tenant/{a.tenant_id}/timeline/{a.timeline_id}"
    source = {"connstring": "postgres://postgres@127.0.0.1:1/postgres", "slot": "s"}
    # Each request that must change nothing: method, path, body.
    dangerous = [
        ("GET", f"{tl}/fullbackup", None),
        ("DELETE", f"/v1/tenant/{a.tenant_id}", None),
        ("DELETE", tl, None),
        ("PUT", f"/v1/tenant/{a.tenant_id}/location_config", {"mode": "Detached"}),
        ("PUT", f"{tl}/source", source),
        ("POST", "/v1/tenant", {"new_tenant_id": os.urandom(16).hex()}),
        ("PUT", "/v1/io_engine", "std-fs"),
    ]

    def unchanged():
        assert sorted(t["id"] for t in admin.tenant_list()) == sorted([a.tenant_id, b])
        detail = admin.timeline_get(a.tenant_id, a.timeline_id)
        assert detail.get("wal_source") is None, detail

    # No token.
    anonymous = PageserverHttpClient(ps.http_port)
    for method, path, body in dangerous:
        status, msg = refused(anonymous, method, path, json=body)
        assert status == 401 and "no Authorization header" in msg, (method, path, status, msg)
    unchanged()
    # A forged token (another key) and an expired one.
    for token, why in [
        (sign({"scope": "pageserverapi"}, PRIVATE_KEY_B), "bad signature"),
        (pageserverapi_token(exp=1000), "expired"),
    ]:
        client = PageserverHttpClient(ps.http_port, auth_token=token)
        for method, path, body in dangerous:
            status, msg = refused(client, method, path, json=body)
            assert status == 401 and why in msg, (method, path, status, msg)
    unchanged()

    # Tenant b's token on tenant a: 403 naming b (and a, on a's data routes).
    as_b = PageserverHttpClient(ps.http_port, auth_token=tenant_token(b))
    for method, path, body in dangerous[:5] + [("GET", f"/v1/tenant/{a.tenant_id}", None)]:
        status, msg = refused(as_b, method, path, json=body)
        names_a = a.tenant_id in msg or not (path.startswith(tl) or method == "GET")
        assert status == 403 and b in msg and names_a, (method, path, status, msg)
    unchanged()

    # Tenant a's token: a's routes, not the management ones.
    as_a = PageserverHttpClient(ps.http_port, auth_token=tenant_token(a.tenant_id))
    assert as_a.tenant_get(a.tenant_id)["timelines"] == [a.timeline_id]
    assert as_a.timeline_get(a.tenant_id, a.timeline_id)["timeline_id"] == a.timeline_id
    assert as_a.keyspace(a.tenant_id, a.timeline_id)
    backup = as_a.request("GET", f"{tl}/fullbackup").content
    assert len(backup) > 1 << 20 and backup[257:262] == b"ustar", len(backup)
    management = [d for d in dangerous if not d[1].startswith(tl)] + [("GET", "/v1/tenant", None)]
    for method, path, body in management:
        status, msg = refused(as_a, method, path, json=body)
        assert status == 403 and "pageserverapi" in msg and a.tenant_id in msg, (method, path, status, msg)
    unchanged()

    # pagebench reads the keyspace through the API with a token, not without.
    log = ps.workdir.parent / "pagebench.log"
    with pytest.raises(RuntimeError):
        run_pagebench(ps, runtime="1s", targets=[f"{a.tenant_id}/{a.timeline_id}"], log_path=log)
    assert "HTTP 401 Unauthorized" in log.read_text(), log.read_text()[:2000]
    result = run_pagebench(
        ps,
        runtime="1s",
        extra_args=["--pageserver-jwt", tenant_token(a.tenant_id)],
        targets=[f"{a.tenant_id}/{a.timeline_id}"],
    )
    assert result.total["request_count"] > 0

    # pageserverapi: everything.
    assert admin.io_engine()
    admin.timeline_delete(b, b_timeline)
    admin.tenant_delete(b)
    assert [t["id"] for t in admin.tenant_list()] == [a.tenant_id]
    # Open without a token.
    assert anonymous.status()["status"] == "ok"
    assert "pageserver_http_responses_total" in anonymous.metrics_text()


def test_open_routes_can_be_closed_and_jwt_needs_a_key(pageserver_factory):
    ps = pageserver_factory.create(overrides={**JWT_OVERRIDES, "http_auth_open_routes": []})
    code, out = ps.run_expect_failure(extra_overrides={"auth_validation_public_key_path": "missing.pem"})
    assert code != 0 and "auth_validation_public_key_path" in out, out
    ps.overrides.pop("auth_validation_public_key_path")
    code, out = ps.run_expect_failure()
    assert code != 0 and "auth_validation_public_key_path" in out and "http_auth_type" in out, out
    ps.overrides["auth_validation_public_key_path"] = str(PUBLIC_KEY_A)
    ps.http_auth_token = pageserverapi_token()
    ps.start()
    anonymous = PageserverHttpClient(ps.http_port)
    for path in ["/v1/status", "/metrics"]:
        status, msg = refused(anonymous, "GET", path)
        assert status == 401 and "no Authorization header" in msg, (path, status, msg)
    assert ps.http_client().status()["status"] == "ok"
    assert ps.http_client().metrics_text()
