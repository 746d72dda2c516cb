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


def uploaded_and_stopped(pageserver_factory, minio, small_backup):
    """A pageserver with the small backup imported and uploaded, stopped."""
    ps = remote_pageserver(pageserver_factory, minio, "ps", storage=RETRY)
    ps.allow_errors(ACTIVATING)
    tl = import_backup(ps, small_backup)
    wait_uploaded(ps.http_client(), tl.tenant_id, tl.timeline_id)
    ps.stop()
    return ps, tl


def assert_activating(ps, tl, *named: str) -> str:
    """The tenant is Activating (not Broken), counted, refusing requests
    with 503; returns the reason, which names `named` and says each cause once."""
    http = ps.http_client()
    info = http.tenant_get(tl.tenant_id)
    assert info["state"]["slug"] == "Activating", info
    reason = info["state"]["data"]["reason"]
    for what in named:
        assert what in reason, f"the reason does not name {what!r}: {reason}"
    causes = reason.split(": ")
    repeated = {c for c in causes if causes.count(c) > 1}
    assert not repeated, f"causes said more than once: {repeated} in {reason}"
    assert len(reason) < 1500, f"{len(reason)} bytes of reason: {reason}"
    assert [t["id"] for t in http.tenant_list() if t["state"]["slug"] == "Activating"] == [tl.tenant_id]
    m = http.metrics()
    assert m.value("pageserver_activating_tenants_count") == 1
    assert m.value("pageserver_broken_tenants_count") == 0
    with pytest.raises(PageserverApiError) as e:
        http.timeline_get(tl.tenant_id, tl.timeline_id)
    assert e.value.status == 503 and "activating" in e.value.msg, e.value
    return reason


def wait_active(ps, tl, timeout: float) -> float:
    """Seconds until the tenant is Active (at most `timeout`)."""
    http = ps.http_client()
    t0 = time.monotonic()

    def active():
        state = http.tenant_get(tl.tenant_id)["state"]
        assert state["slug"] == "Active", state

    wait_until(active, timeout=timeout, interval=0.05, what="tenant Active")
    assert http.metrics().value("pageserver_activating_tenants_count") == 0
    return time.monotonic() - t0


def test_store_down_at_start_up(pageserver_factory, minio, small_backup):
    ps, tl = uploaded_and_stopped(pageserver_factory, minio, small_backup)
    minio.stop()
    ps.start()
    assert_activating(ps, tl, "S3 bucket", minio.endpoint, "claim generation 1")
    # Tried again meanwhile, still not Broken.
    http = ps.http_client()

    def tried_thrice():
        state = http.tenant_get(tl.tenant_id)["state"]
        assert state["slug"] == "Activating" and state["data"]["tries"] >= 3, state

    wait_until(tried_thrice, timeout=10, what="3 tries")
    assert_activating(ps, tl)

    minio.start()
    took = wait_active(ps, tl, timeout=5)
    assert took < 5, f"Active {took:.1f} s after the store came back"
    compare_all(ps, tl, small_backup)


def test_wrong_secret_at_start_up(pageserver_factory, minio, small_backup):
    ps, tl = uploaded_and_stopped(pageserver_factory, minio, small_backup)
    ps.start(extra_env={"AWS_SECRET_ACCESS_KEY": "not-the-secret"})
    reason = assert_activating(ps, tl, "403")
    assert "Signature" in reason, f"the reason does not say what was refused: {reason}"

    ps.stop()
    ps.start()
    wait_active(ps, tl, timeout=5)
    compare_all(ps, tl, small_backup)
