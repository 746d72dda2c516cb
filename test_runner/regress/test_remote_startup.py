"""Start-up while remote storage cannot be used: a tenant whose load
cannot claim its generation (MinIO down, a wrong secret) is Activating, not
Broken. The tenant API says so with the store's error, each cause once;
`pageserver_activating_tenants_count` counts it; requests get 503 naming
the state. Its load is tried again with backoff (here at most 0.5 s
apart), and the tenant serves, every page right, once the store answers.
"""

from __future__ import annotations

import time

import pytest

from fixtures.compare import compare_all, import_backup
from fixtures.http import PageserverApiError
from fixtures.remote import remote_pageserver, wait_uploaded
from fixtures.utils import wait_until

RETRY = {"retry_max_backoff": "500ms"}
# Logged while the store cannot be used (the tenant is not Broken).
ACTIVATING = r"is activating: remote storage is unavailable"


def uploaded_and_stopped(pageserver_factory, minio, small_backup, tenants: int = 1):
    """A pageserver with the small backup imported (as `tenants` tenants)
    and uploaded, stopped."""
    ps = remote_pageserver(pageserver_factory, minio, "ps", storage=RETRY)
    ps.allow_errors(ACTIVATING)
    tls = [import_backup(ps, small_backup) for _ in range(tenants)]
    for tl in tls:
        wait_uploaded(ps.http_client(), tl.tenant_id, tl.timeline_id)
    ps.stop()
    return ps, tls


def assert_activating(ps, tls, *named: str) -> list[str]:
    """The tenants are Activating (not Broken), counted, refusing requests
    with 503; returns the reasons, which name `named` and say each cause once."""
    http = ps.http_client()
    reasons = []
    for tl in tls:
        info = http.tenant_get(tl.tenant_id)
        assert info["state"]["slug"] == "Activating", info
        reason = info["state"]["data"]["reason"]
        for what in named:
            assert what in reason, f"the reason does not name {what!r}: {reason}"
        causes = reason.split(": ")
        repeated = {c for c in causes if causes.count(c) > 1}
        assert not repeated, f"causes said more than once: {repeated} in {reason}"
        assert len(reason) < 1500, f"{len(reason)} bytes of reason: {reason}"
        with pytest.raises(PageserverApiError) as e:
            http.timeline_get(tl.tenant_id, tl.timeline_id)
        assert e.value.status == 503 and "activating" in e.value.msg, e.value
        reasons.append(reason)
    listed = sorted(t["id"] for t in http.tenant_list() if t["state"]["slug"] == "Activating")
    assert listed == sorted(tl.tenant_id for tl in tls)
    m = http.metrics()
    assert m.value("pageserver_activating_tenants_count") == len(tls)
    assert m.value("pageserver_broken_tenants_count") == 0
    return reasons


def wait_active(ps, tls, timeout: float) -> float:
    """Seconds until every tenant is Active (at most `timeout`)."""
    http = ps.http_client()
    t0 = time.monotonic()

    def active():
        for tl in tls:
            state = http.tenant_get(tl.tenant_id)["state"]
            assert state["slug"] == "Active", state

    wait_until(active, timeout=timeout, interval=0.05, what="tenants Active")
    assert http.metrics().value("pageserver_activating_tenants_count") == 0
    return time.monotonic() - t0


def test_store_down_at_start_up(pageserver_factory, minio, small_backup):
    ps, tls = uploaded_and_stopped(pageserver_factory, minio, small_backup, tenants=2)
    minio.stop()
    ps.start()
    # One tenant tried the store at start-up; the other was not held up by it.
    assert ps.log_contains("1 tenants not tried at start-up: remote storage was unavailable"), ps.log_tail()
    http = ps.http_client()

    def tried_thrice():
        for tl in tls:
            state = http.tenant_get(tl.tenant_id)["state"]
            assert state["slug"] == "Activating" and state["data"]["tries"] >= 3, state

    wait_until(tried_thrice, timeout=10, what="3 tries")
    # Tried again meanwhile, still not Broken.
    assert_activating(ps, tls, "S3 bucket", minio.endpoint, "claim generation 1", "Connection refused")

    minio.start()
    took = wait_active(ps, tls, timeout=5)
    assert took < 5, f"Active {took:.1f} s after the store came back"
    for tl in tls:
        compare_all(ps, tl, small_backup)


def test_wrong_secret_at_start_up(pageserver_factory, minio, small_backup):
    ps, tls = uploaded_and_stopped(pageserver_factory, minio, small_backup)
    ps.start(extra_env={"AWS_SECRET_ACCESS_KEY": "not-the-secret"})
    [reason] = assert_activating(ps, tls, "403")
    assert "SignatureDoesNotMatch" in reason, f"the reason does not say what was refused: {reason}"

    ps.stop()
    ps.start()
    wait_active(ps, tls, timeout=5)
    compare_all(ps, tls[0], small_backup)
