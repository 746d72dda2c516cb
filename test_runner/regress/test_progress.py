"""Long operations show their progress in the API: an import streamed in two
halves shows half its bytes done (of the Content-Length) in the tenant's
detail while it waits for the rest; a compaction answers its own progress
(bytes merged of the L0s' bytes, key ranges imaged), with a rate; a
fullbackup read slowly shows its bytes sent so far, and the prefetch after
an attach its layers downloaded of all; each finishes with an INFO line."""

from __future__ import annotations

import os
import threading

import pytest

from fixtures.compare import import_backup
from fixtures.remote import newest_index, remote_pageserver
from fixtures.utils import wait_until

MANUAL = {"compaction_period": "0 s", "gc_period": "0 s", "pitr_interval": "0 s"}


def test_import_and_compaction_progress(pageserver_factory, small_backup):
    ps = pageserver_factory.create(overrides=MANUAL)
    ps.start()
    http = ps.http_client()
    tenant = http.tenant_create()
    timeline = os.urandom(16).hex()
    data = small_backup.path.read_bytes()
    half = len(data) // 2
    rest_allowed = threading.Event()
    body = GatedBody(data, half, rest_allowed)
    result: dict = {}

    def run_import():
        result["answer"] = http.request(
            "PUT",
            f"/v1/tenant/{tenant}/timeline/{timeline}/import_basebackup",
            data=body,
            headers={"Content-Type": "application/x-tar"},
        )

    th = threading.Thread(target=run_import)
    th.start()
    try:
        op = wait_for_operation(http, tenant, "import", half)
        assert op["subject"] == f"{tenant}/{timeline}" and op["unit"] == "bytes", op
        assert op["total"] == len(data) and not op["finished"], op
        assert op["rate_per_s"] > 0 and op["elapsed_ms"] >= 0, op
    finally:
        rest_allowed.set()
        th.join(60)
    assert result["answer"].status_code == 201, result["answer"].text
    assert http.tenant_get(tenant)["operations"] == [], "a finished import is no longer listed"
    assert ps.log_contains(r"import of .*: \d+ of \d+ bytes in .* \(done\)")

    report = http.timeline_compact(tenant, timeline, force_l0=True, force_images=True)
    by_op = {p["operation"]: p for p in report["progress"]}
    merged = by_op["compaction"]
    assert merged["finished"] and merged["unit"] == "bytes" and merged["done"] > 0, merged
    assert merged["total"] >= merged["done"] and merged["rate_per_s"] > 0, merged
    images = by_op["image_creation"]
    assert images["finished"] and images["done"] == images["total"] > 0, images


def test_fullbackup_progress(pageserver_factory, small_backup):
    ps = pageserver_factory.create(overrides=MANUAL)
    ps.start()
    http = ps.http_client()
    tl = import_backup(ps, small_backup)
    tenant, timeline = tl.tenant_id, tl.timeline_id
    # A fullbackup whose reader takes one chunk, then waits: the daemon's
    # stream stops on the full socket, and the detail shows what it sent.
    path = f"/v1/tenant/{tenant}/timeline/{timeline}/fullbackup"
    with http.request("GET", path, stream=True) as resp:
        chunks = resp.iter_content(65536)
        received = len(next(chunks))
        op = wait_for_operation(http, tenant, "fullbackup", 1)
        assert op["subject"] == f"{tenant}/{timeline}" and op["unit"] == "bytes", op
        assert not op["finished"] and op["total"] is None, op
        received += sum(len(c) for c in chunks)
    assert op["done"] < received, (op, received)
    assert ps.log_contains(rf"fullbackup of {tenant}/{timeline}: {received} bytes in .* \(done\)")
    assert http.tenant_get(tenant)["operations"] == [], "a finished fullbackup is no longer listed"


@pytest.mark.failpoints
def test_attach_prefetch_progress(pageserver_factory, minio, small_backup, testing_pageserver_bin):
    ps = remote_pageserver(pageserver_factory, minio, "ps", binary=testing_pageserver_bin, **MANUAL)
    http = ps.http_client()
    tl = import_backup(ps, small_backup)
    tenant, timeline = tl.tenant_id, tl.timeline_id
    http.tenant_detach(tenant)
    layers = len(newest_index(minio, tenant, timeline)["layers"])
    assert layers >= 1
    # Slowed down per layer, the prefetch after an attach shows layers done of all.
    http.configure_failpoints({"prefetch::before-download": "sleep(300)"})
    http.tenant_attach(tenant, 2)
    op = wait_for_operation(http, tenant, "attach_prefetch", 0)
    assert op["unit"] == "layers" and op["total"] == layers and op["done"] < layers, op
    line = rf"attach_prefetch of {tenant}/{timeline}: {layers} of {layers} layers in .* \(done\)"

    def logged():
        assert ps.log_contains(line), line

    wait_until(logged, timeout=30, what="the prefetch's last progress line")
    http.configure_failpoints({"prefetch::before-download": "off"})
    assert http.tenant_get(tenant)["operations"] == [], "a finished prefetch is no longer listed"


class GatedBody:
    """A request body of known length (so a Content-Length is sent) whose
    bytes after `gate_at` are sent only once `gate` is set."""

    def __init__(self, data: bytes, gate_at: int, gate: threading.Event):
        self.data, self.gate_at, self.gate, self.pos = data, gate_at, gate, 0

    def __len__(self) -> int:
        return len(self.data) - self.pos

    def read(self, n: int = -1) -> bytes:
        if self.pos == self.gate_at:
            assert self.gate.wait(30), "the test never released the second half"
        end = len(self.data) if n < 0 else self.pos + n
        if self.pos < self.gate_at:
            end = min(end, self.gate_at)
        chunk = self.data[self.pos:end]
        self.pos += len(chunk)
        return chunk

    def __iter__(self):
        while chunk := self.read(65536):
            yield chunk


def wait_for_operation(http, tenant: str, operation: str, done_at_least: int) -> dict:
    import time

    deadline = time.monotonic() + 30
    while True:
        ops = [o for o in http.tenant_get(tenant).get("operations", []) if o["operation"] == operation]
        if ops and ops[0]["done"] >= done_at_least:
            return ops[0]
        assert time.monotonic() < deadline, f"no {operation} with {done_at_least} done: {ops}"
        time.sleep(0.02)
