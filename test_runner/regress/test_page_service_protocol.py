"""Page service protocol: valid sessions in v2 and v3, in-band per-request
errors that keep the stream usable, malformed traffic that ends one stream
with a clear error while the daemon keeps serving every other connection."""

from __future__ import annotations

import os
import socket
import struct
import time

import pytest

from fixtures.compare import assert_error, import_backup
from fixtures.libpq import LibpqConnection, ProtocolViolation, ServerError, encode_message, startup_message
from fixtures.pagestream import (
    LSN_MAX,
    PAGE_SIZE,
    DbSizeRequest,
    ExistsRequest,
    ExistsResponse,
    GetPageRequest,
    GetPageResponse,
    GetSlruSegmentRequest,
    Header,
    NblocksRequest,
    NblocksResponse,
    RelTag,
    encode_request,
    parse_lsn,
)

# The daemon may log rejected requests; these are the expected ones here.
PROTOCOL_ERRORS_ALLOWED = [
    r"(?i)bad ?request",
    r"(?i)malformed|invalid|decode|parse|unknown|unexpected|trailing|too (large|long|short|big)",
    r"(?i)not found|no such",
    r"(?i)protocol",
    r"(?i)timed? ?out|timeout",
    r"closing connection from .*: (message of \d+ bytes exceeds the limit|client sent Copy(Done|Fail))",
]


@pytest.fixture
def served(pageserver, small_backup):
    """(pageserver, timeline, a relation with blocks, its nblocks, last_record_lsn)."""
    tl = import_backup(pageserver, small_backup)
    rel = max(small_backup.relations, key=small_backup.nblocks)
    info = pageserver.http_client().timeline_get(tl.tenant_id, tl.timeline_id)
    pageserver.allow_errors(*PROTOCOL_ERRORS_ALLOWED)
    return pageserver, tl, rel, small_backup.nblocks(rel), parse_lsn(info["last_record_lsn"])


def assert_serving(ps, tl, rel) -> None:
    """A fresh connection gets a real page: the daemon is healthy."""
    with ps.pagestream(tl.tenant_id, tl.timeline_id) as c:
        resp = c.get_page(rel, 0)
        assert isinstance(resp, GetPageResponse) and resp.page != bytes(PAGE_SIZE)


def assert_stream_ended_with_error(conn: LibpqConnection) -> ServerError:
    """The next thing on `conn` is an ErrorResponse, then the stream ends."""
    with pytest.raises(ServerError) as e:
        conn.read_copy_data()
    assert e.value.message, "ErrorResponse without a message"
    # After the error the server sends nothing else that is a CopyData.
    rest = []
    try:
        rest = conn.read_until_closed(limit=10)
    except (ConnectionResetError, socket.timeout):
        pass
    assert all(tag != b"d" for tag, _ in rest), f"CopyData after the fatal error: {rest}"
    return e.value


@pytest.mark.parametrize("version", [2, 3])
def test_every_request_type(served, version):
    ps, tl, rel, nblocks, last_lsn = served
    with ps.pagestream(tl.tenant_id, tl.timeline_id, version=version) as c:
        assert c.exists(rel).exists is True
        assert c.nblocks(rel).n_blocks == nblocks
        page = c.get_page(rel, 0)
        assert isinstance(page, GetPageResponse) and len(page.page) == PAGE_SIZE
        # Explicit LSN = last_record_lsn gives the same page as "latest".
        assert c.get_page(rel, 0, lsn=last_lsn).page == page.page
        assert c.db_size(rel.dbnode).db_size >= nblocks * PAGE_SIZE
        seg = c.slru_segment(0, 0)
        assert len(seg.segment) % PAGE_SIZE == 0 and len(seg.segment) > 0
        # Past the end: a zero page.
        assert c.get_page(rel, nblocks + 10).page == bytes(PAGE_SIZE)


def test_pipelined_mixed_requests_answered_in_order(served):
    ps, tl, rel, nblocks, last_lsn = served
    with ps.pagestream(tl.tenant_id, tl.timeline_id, version=3) as c:
        reqs = []
        for i in range(1000):
            hdr = Header(10_000 + i, LSN_MAX, 0)
            kind = i % 7
            if kind == 0:
                reqs.append(NblocksRequest(rel, hdr))
            elif kind == 1:
                reqs.append(ExistsRequest(rel, hdr))
            elif kind == 2:
                reqs.append(DbSizeRequest(rel.dbnode, hdr))
            else:
                reqs.append(GetPageRequest(rel, (i * 31) % nblocks, hdr))
        c.send_many(reqs)
        for _ in reqs:
            c.recv()  # checks the v3 echo against the FIFO


@pytest.mark.parametrize("version", [2, 3])
def test_lsn_zero_is_bad_request(served, version):
    ps, tl, rel, _, _ = served
    with ps.pagestream(tl.tenant_id, tl.timeline_id, version=version) as c:
        assert_error(c.get_page(rel, 0, lsn=0))
        assert_error(c.nblocks(rel, lsn=0))
        # The stream is still usable.
        assert isinstance(c.get_page(rel, 0), GetPageResponse)


@pytest.mark.parametrize("version", [2, 3])
def test_request_lsn_below_not_modified_since(served, version):
    ps, tl, rel, _, last_lsn = served
    with ps.pagestream(tl.tenant_id, tl.timeline_id, version=version) as c:
        assert_error(c.get_page(rel, 0, lsn=last_lsn - 8, nms=last_lsn))
        assert isinstance(c.get_page(rel, 0, lsn=last_lsn, nms=last_lsn), GetPageResponse)


def test_unknown_slru_kind_is_in_band_error(served):
    """As in Neon, the kind byte is checked by the handler: a per-request error."""
    ps, tl, rel, _, _ = served
    with ps.pagestream(tl.tenant_id, tl.timeline_id) as c:
        assert_error(c.request(GetSlruSegmentRequest(9, 0, c._hdr(LSN_MAX, 0))))
        assert_error(c.slru_segment(0, 0x7FFF))  # a segment that does not exist
        assert isinstance(c.get_page(rel, 0), GetPageResponse)


def test_unknown_relation_and_relnode_zero(served):
    ps, tl, rel, _, _ = served
    missing = RelTag(rel.spcnode, rel.dbnode, 999_999_999, 0)
    with ps.pagestream(tl.tenant_id, tl.timeline_id) as c:
        resp = c.exists(missing)
        assert isinstance(resp, ExistsResponse) and resp.exists is False
        assert_error(c.nblocks(missing))
        assert_error(c.get_page(missing, 0))
        assert_error(c.get_page(RelTag(rel.spcnode, rel.dbnode, 0, 0), 0))
        assert isinstance(c.nblocks(rel), NblocksResponse)


def test_wait_for_lsn_times_out(pageserver_factory, small_backup):
    ps = pageserver_factory.create(overrides={"wait_lsn_timeout": "1s"}).start()
    ps.allow_errors(*PROTOCOL_ERRORS_ALLOWED)
    tl = import_backup(ps, small_backup)
    last = parse_lsn(ps.http_client().timeline_get(tl.tenant_id, tl.timeline_id)["last_record_lsn"])
    rel = max(small_backup.relations, key=small_backup.nblocks)
    with ps.pagestream(tl.tenant_id, tl.timeline_id) as c:
        t0 = time.monotonic()
        assert_error(c.get_page(rel, 0, lsn=LSN_MAX, nms=last + 0x1000))
        took = time.monotonic() - t0
        assert 0.9 <= took < 10, f"wait_lsn_timeout=1s but the request took {took:.2f}s"
        assert isinstance(c.get_page(rel, 0), GetPageResponse)


@pytest.mark.parametrize("which", ["tenant", "timeline"])
def test_unknown_tenant_or_timeline(served, which):
    ps, tl, rel, _, _ = served
    tenant = os.urandom(16).hex() if which == "tenant" else tl.tenant_id
    timeline = os.urandom(16).hex()
    with ps.libpq() as conn:
        with pytest.raises(ServerError) as e:
            conn.start_copy_both(f"pagestream_v3 {tenant} {timeline}")
        assert "not found" in e.value.message.lower() or which in e.value.message.lower(), e.value
    assert_serving(ps, tl, rel)


def test_unknown_command_keeps_session(served):
    ps, tl, rel, _, _ = served
    with ps.libpq() as conn:
        with pytest.raises(ServerError):
            conn.simple_query("make me a sandwich")
        with pytest.raises(ServerError):
            conn.simple_query("pagestream_v3 not-an-id")
        conn.start_copy_both(f"pagestream_v3 {tl.tenant_id} {tl.timeline_id}")
        conn.send_copy_data(encode_request(GetPageRequest(rel, 0, Header(1, LSN_MAX, 0)), 3))
        assert conn.read_copy_data()[0] == 102


MALFORMED = {
    "truncated": lambda rel: encode_request(GetPageRequest(rel, 0, Header(1, LSN_MAX, 0)), 3)[:-2],
    "trailing_bytes": lambda rel: encode_request(GetPageRequest(rel, 0, Header(1, LSN_MAX, 0)), 3) + b"\0",
    "unknown_tag": lambda rel: bytes([42]) + encode_request(GetPageRequest(rel, 0, Header(1, LSN_MAX, 0)), 3)[1:],
    "response_tag": lambda rel: bytes([102]) + encode_request(GetPageRequest(rel, 0, Header(1, LSN_MAX, 0)), 3)[1:],
    "empty": lambda rel: b"",
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_request_ends_stream_only(served, case):
    ps, tl, rel, _, _ = served
    bystander = ps.pagestream(tl.tenant_id, tl.timeline_id)
    try:
        conn = ps.libpq()
        conn.start_copy_both(f"pagestream_v3 {tl.tenant_id} {tl.timeline_id}")
        conn.send_copy_data(MALFORMED[case](rel))
        err = assert_stream_ended_with_error(conn)
        conn.close()
        assert err.code, "ErrorResponse without SQLSTATE"
        # The other connection, opened before, still works.
        assert isinstance(bystander.get_page(rel, 0), GetPageResponse)
    finally:
        bystander.close()
    assert_serving(ps, tl, rel)


def test_oversized_frame_is_refused_without_waiting(served):
    """A CopyData header announcing ~2 GiB must be refused at once, not buffered."""
    ps, tl, rel, _, _ = served
    conn = ps.libpq(timeout=15)
    conn.start_copy_both(f"pagestream_v3 {tl.tenant_id} {tl.timeline_id}")
    t0 = time.monotonic()
    conn.send_raw(b"d" + struct.pack("!i", 0x7FFF_FFF0) + b"\x02" * 64)
    assert_stream_ended_with_error(conn)
    assert time.monotonic() - t0 < 10
    conn.close()
    assert_serving(ps, tl, rel)


@pytest.mark.parametrize("msg", [b"Q", b"c", b"f", b"Z"])
def test_non_copydata_message_in_stream(served, msg):
    ps, tl, rel, _, _ = served
    conn = ps.libpq()
    conn.start_copy_both(f"pagestream_v3 {tl.tenant_id} {tl.timeline_id}")
    body = b"select 1\0" if msg == b"Q" else (b"oops\0" if msg == b"f" else b"")
    conn.send_raw(encode_message(msg, body))
    if msg == b"c":
        # CopyDone: the stream ends; an error or a clean close are both fine,
        # but never a CopyData.
        try:
            rest = conn.read_until_closed(limit=10)
        except ServerError:
            rest = []
        except (ProtocolViolation, ConnectionResetError):
            rest = []
        assert all(tag != b"d" for tag, _ in rest)
    else:
        assert_stream_ended_with_error(conn)
    conn.close()
    assert_serving(ps, tl, rel)


def test_terminate_ends_session_cleanly(served):
    ps, tl, rel, _, _ = served
    c = ps.pagestream(tl.tenant_id, tl.timeline_id)
    assert isinstance(c.get_page(rel, 0), GetPageResponse)
    c.conn.terminate()
    assert c.conn.is_closed_by_server()
    c.conn.close()
    # EOF without Terminate is a clean end too.
    c = ps.pagestream(tl.tenant_id, tl.timeline_id)
    c.conn.sock.shutdown(socket.SHUT_WR)
    assert c.conn.is_closed_by_server()
    c.conn.close()
    assert_serving(ps, tl, rel)


def test_ssl_and_gssenc_requests_answered_n(served):
    ps, tl, rel, _, _ = served
    for code in (80877103, 80877104):  # SSLRequest, GSSENCRequest
        conn = LibpqConnection("127.0.0.1", ps.pg_port, connect=False)
        conn.open_socket()
        conn.send_raw(struct.pack("!ii", 8, code))
        assert conn.sock.recv(1) == b"N"
        conn.send_raw(startup_message({"user": "postgres"}))
        while (m := conn.read_message())[0] != b"Z":
            assert m[0] in (b"R", b"S", b"K"), m
        conn.start_copy_both(f"pagestream_v2 {tl.tenant_id} {tl.timeline_id}")
        conn.close()


@pytest.mark.parametrize("case", ["huge_startup", "tiny_startup", "bad_protocol"])
def test_bad_startup_packet(served, case):
    ps, tl, rel, _, _ = served
    conn = LibpqConnection("127.0.0.1", ps.pg_port, connect=False, timeout=10)
    conn.open_socket()
    if case == "huge_startup":
        conn.send_raw(struct.pack("!ii", 20_000, 196608) + b"x" * 100)
    elif case == "tiny_startup":
        conn.send_raw(struct.pack("!i", 4))
    else:
        conn.send_raw(startup_message({"user": "postgres"})[:4] + struct.pack("!i", 0x00020000) + b"user\0postgres\0\0")
    # Refused: an ErrorResponse and/or a close, within the socket timeout.
    try:
        msgs = conn.read_until_closed(limit=5)
        assert all(tag == b"E" for tag, _ in msgs), msgs
    except (ConnectionResetError, ProtocolViolation):
        pass
    conn.close()
    assert_serving(ps, tl, rel)


def test_slow_reader_does_not_block_shutdown(served):
    """A client that sends many GetPages and never reads: shutdown is bounded."""
    ps, tl, rel, nblocks, _ = served
    conn = ps.libpq()
    conn.start_copy_both(f"pagestream_v3 {tl.tenant_id} {tl.timeline_id}")
    reqs = b"".join(
        encode_message(b"d", encode_request(GetPageRequest(rel, i % nblocks, Header(i, LSN_MAX, 0)), 3)) for i in range(20_000)
    )
    conn.sock.settimeout(2)
    try:
        conn.sock.sendall(reqs)
    except (socket.timeout, OSError):
        pass  # the server stopped reading: its send buffer is full
    took = ps.stop(timeout=30)
    assert took < 15, f"shutdown with a stuck client took {took:.1f}s"
    conn.close()
