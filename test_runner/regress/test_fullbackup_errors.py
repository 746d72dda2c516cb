"""How a full backup fails, over HTTP and libpq (issue 27, item 9): an error
known before the first byte is a 4xx/5xx with a JSON message naming what was
wrong; a timeline deleted (or a tenant deleted) under a backup that is being
streamed ends it so that no client can take it for a complete tar: HTTP
aborts the chunked body (no final zero-length chunk), libpq sends an
ErrorResponse instead of CopyDone/CommandComplete. No PostgreSQL runs: the
data is the imported `small_backup` (PostgreSQL 15)."""

from __future__ import annotations

import io


import pytest
import requests

from fixtures.compare import import_backup
from fixtures.http import PageserverApiError
from fixtures.libpq import ServerError, encode_message, parse_error_fields
from fixtures.pagestream import parse_lsn
from fixtures.utils import fmt_lsn

UNKNOWN = "00000000000000000000000000000001"
# Background tasks off; GC keeps nothing beyond its horizon.
MANUAL = {"compaction_period": "0 s", "gc_period": "0 s", "pitr_interval": "0 s"}


def fullbackup_path(tenant: str, timeline: str) -> str:
    return f"/v1/tenant/{tenant}/timeline/{timeline}/fullbackup"


def refused(http, tenant: str, timeline: str, lsn: str | None = None) -> PageserverApiError:
    """The error of a fullbackup request that must be refused before the
    response head: a JSON body, not a tar."""
    params = {"lsn": lsn} if lsn else None
    with pytest.raises(PageserverApiError) as e:
        http.request("GET", fullbackup_path(tenant, timeline), params=params)
    return e.value


def test_http_fullbackup_errors_before_the_first_byte(pageserver_factory, small_backup):
    ps = pageserver_factory.create(overrides=MANUAL).start()
    http = ps.http_client()
    tl = import_backup(ps, small_backup)
    t, l = tl.tenant_id, tl.timeline_id
    imported = parse_lsn(http.timeline_get(t, l)["last_record_lsn"])

    e = refused(http, UNKNOWN, l)
    assert e.status == 404 and UNKNOWN in e.msg and "not found" in e.msg, e
    e = refused(http, t, UNKNOWN)
    assert e.status == 404 and UNKNOWN in e.msg and "not found" in e.msg, e
    beyond = fmt_lsn(imported + 8)
    e = refused(http, t, l, beyond)
    assert e.status == 400 and beyond in e.msg and "outside the readable range" in e.msg, e

    # Below the GC cutoff: history past the import, then GC up to its end.
    later = imported + 0x1000
    key = f"00{1663:08X}{5:08X}{16384:08X}00{1:08X}"
    http.testing_ingest(t, l, fmt_lsn(later), {key: bytes(8192)})
    http.timeline_checkpoint(t, l)
    e = refused(http, t, l, fmt_lsn(later - 4))
    assert e.status == 400 and "not a record boundary" in e.msg, e
    # Data that cannot make a data directory, found by the generator before
    # its first chunk: a relmap file of the wrong size (here 7 bytes). A
    # status naming it, not a 200 whose body stops at 0 bytes.
    bad = later + 0x1000
    http.testing_ingest(t, l, fmt_lsn(bad), {f"00{1663:08X}{5:08X}{0:08X}00{0:08X}": b"garbage"})
    e = refused(http, t, l, fmt_lsn(bad))
    assert e.status == 500 and "relmap file of database 1663/5" in e.msg and "7 bytes" in e.msg, e
    ps.allow_errors("HTTP request failed: .*relmap file of database 1663/5")
    cutoff = parse_lsn(http.timeline_gc(t, l, gc_horizon=0)["gc_cutoff"])
    assert cutoff > imported, cutoff
    e = refused(http, t, l, fmt_lsn(imported))
    assert e.status == 400 and "GC cutoff" in e.msg and fmt_lsn(imported) in e.msg, e


def read_some(raw, want: int) -> int:
    got = 0
    while got < want:
        b = raw.read(min(65536, want - got))
        if not b:
            break
        got += len(b)
    return got


def test_http_fullbackup_body_aborted_when_timeline_deleted(pageserver_factory, small_backup):
    """The client reads the first chunk and stops; the timeline is deleted
    (promptly: a client that does not read cannot hold that up); what it
    then reads ends in an incomplete chunked body, not a short tar."""
    ps = pageserver_factory.create(overrides=MANUAL).start()
    ps.allow_errors("fullbackup .*over HTTP .*failed while streaming")
    http = ps.http_client()
    tl = import_backup(ps, small_backup)
    t, l = tl.tenant_id, tl.timeline_id
    url = f"http://127.0.0.1:{ps.http_port}{fullbackup_path(t, l)}"
    with requests.get(url, stream=True, timeout=30) as r:
        assert r.status_code == 200, r.text
        assert r.headers.get("transfer-encoding") == "chunked", r.headers
        got = read_some(r.raw, 256 * 1024)
        assert got == 256 * 1024
        # The generator waits on the client now; the delete must not.
        requests.delete(f"http://127.0.0.1:{ps.http_port}/v1/tenant/{t}/timeline/{l}", timeout=10).raise_for_status()
        with pytest.raises(requests.exceptions.ChunkedEncodingError):
            for chunk in r.iter_content(1 << 20):
                got += len(chunk)
    # What the client sees is the contract; whether the generator logs its
    # failure depends on which side noticed the deletion first (not asserted).
    assert got > 0


class CopyOut:
    """A `fullbackup` COPY OUT read by hand, so the test decides when to read."""

    def __init__(self, conn, query: str):
        self.conn = conn
        conn.send_raw(encode_message(b"Q", query.encode() + b"\0"))
        tag, _ = conn.read_message()
        assert tag == b"H", f"expected CopyOutResponse, got {tag!r}"
        self.data_bytes = 0
        self.tags: list[bytes] = []

    def read_data(self, want: int) -> None:
        while self.data_bytes < want:
            tag, body = self.conn.read_message()
            assert tag == b"d", tag
            self.data_bytes += len(body)

    def read_to_end(self) -> dict[str, str] | None:
        """The rest of the reply: the ErrorResponse's fields, or None if it
        ended cleanly; every tag is kept in `tags`."""
        error = None
        while True:
            msg = self.conn.read_message()
            if msg is None:
                self.tags.append(b"EOF")
                return error
            tag, body = msg
            self.tags.append(tag)
            if tag == b"d":
                self.data_bytes += len(body)
            elif tag == b"E":
                error = parse_error_fields(body)
            elif tag == b"Z":
                return error


def test_libpq_fullbackup_ends_with_error_when_tenant_deleted(pageserver_factory, small_backup):
    ps = pageserver_factory.create(overrides=MANUAL).start()
    http = ps.http_client()
    tl = import_backup(ps, small_backup)
    t, l = tl.tenant_id, tl.timeline_id
    with ps.libpq() as conn:
        copy = CopyOut(conn, f"fullbackup {t} {l}")
        copy.read_data(256 * 1024)
        http.tenant_delete(t)
        error = copy.read_to_end()
        assert b"c" not in copy.tags and b"C" not in copy.tags, f"ended as if complete: {copy.tags[-5:]}"
        assert error is not None, f"no ErrorResponse: {copy.tags[-5:]}"
        assert copy.tags[-2:] == [b"E", b"Z"], copy.tags[-5:]
        assert error["C"] == "57P01" and t in error["M"] and "shutting down" in error["M"], error
        # The session goes on.
        with pytest.raises(ServerError) as e:
            conn.copy_out(f"fullbackup {t} {l}", io.BytesIO())
        assert "not found" in e.value.message, e.value
