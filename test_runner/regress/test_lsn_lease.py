"""LSN leases and the extended query protocol against the real daemon:
`lease lsn` over the raw libpq client (simple and extended protocol, error
paths) and over psycopg 3 (simple, prepared, binary), the HTTP route and
the timeline detail, and leases that survive a restart while expired ones
are dropped."""

from __future__ import annotations

import os
import struct
import time

import psycopg
import pytest

from fixtures.http import PageserverApiError
from fixtures.libpq import encode_message

INITIAL_LSN = "0/1000000"
LEASE_LENGTH_MS = 600_000  # the default lsn_lease_length, 10 minutes


@pytest.fixture
def timeline(pageserver):
    """(pageserver, tenant_id, timeline_id) of an empty timeline starting at INITIAL_LSN."""
    http = pageserver.http_client()
    tenant_id = http.tenant_create()
    timeline_id = os.urandom(16).hex()
    body = {"new_timeline_id": timeline_id, "initial_lsn": INITIAL_LSN}
    http._json("POST", f"/v1/tenant/{tenant_id}/timeline", json=body)
    # Refusals and failed commands are logged at INFO; nothing is expected at WARN/ERROR.
    return pageserver, tenant_id, timeline_id


def lease_cmd(tenant_id: str, timeline_id: str, lsn: str) -> str:
    return f"lease lsn {tenant_id} {timeline_id} {lsn}"


def check_valid_until(ms: str | int, length_ms: int = LEASE_LENGTH_MS) -> int:
    ahead = int(ms) - int(time.time() * 1000)
    # Leases are written a quarter length ahead (lease.rs: the durability contract).
    assert length_ms - 10_000 <= ahead <= length_ms * 5 // 4, f"valid_until {ms} is {ahead} ms ahead"
    return int(ms)


def cstr(s: str) -> bytes:
    return s.encode() + b"\0"


def read_tags(conn, until: bytes = b"Z") -> list[tuple[bytes, bytes]]:
    """Messages up to and including the first one tagged `until`."""
    out = []
    while True:
        msg = conn.read_message()
        assert msg is not None, f"EOF after {[t for t, _ in out]}"
        out.append(msg)
        if msg[0] == until:
            return out


def test_lease_over_raw_libpq(timeline):
    ps, tenant_id, timeline_id = timeline
    with ps.libpq(user="cloud_admin") as c:
        # Simple protocol, with the trailing blank Neon's compute sends.
        rows = c.simple_query(lease_cmd(tenant_id, timeline_id, "0/2000000") + " ")
        assert len(rows) == 1 and len(rows[0]) == 1
        check_valid_until(rows[0][0])
        # Below the timeline's history: NULL (Neon's "not granted"), with a notice.
        c.send_raw(encode_message(b"Q", cstr(lease_cmd(tenant_id, timeline_id, "0/FFFFFF"))))
        msgs = read_tags(c)
        tags = b"".join(t for t, _ in msgs)
        assert tags == b"NTDCZ", tags
        assert b"below the history" in msgs[0][1]
        assert msgs[2][1] == struct.pack("!hi", 1, -1), "one NULL column"

        # Extended protocol: Parse, Bind, Describe, Execute, Sync.
        q = lease_cmd(tenant_id, timeline_id, "0/3000000")
        c.send_raw(
            encode_message(b"P", cstr("s1") + cstr(q) + struct.pack("!h", 0))
            + encode_message(b"B", cstr("") + cstr("s1") + struct.pack("!hhh", 0, 0, 0))
            + encode_message(b"D", b"P" + cstr(""))
            + encode_message(b"E", cstr("") + struct.pack("!i", 0))
            + encode_message(b"S", b"")
        )
        msgs = read_tags(c)
        assert b"".join(t for t, _ in msgs) == b"12TDCZ"
        (ln,) = struct.unpack("!i", msgs[3][1][2:6])
        check_valid_until(msgs[3][1][6 : 6 + ln].decode())

        # An error skips to Sync; a malformed body is named.
        c.send_raw(
            encode_message(b"P", cstr("") + cstr("SELECT 1") + struct.pack("!h", 0))
            + encode_message(b"E", cstr("") + struct.pack("!i", 0))
            + encode_message(b"S", b"")
        )
        msgs = read_tags(c)
        assert b"".join(t for t, _ in msgs) == b"EZ"
        assert b"unsupported command" in msgs[0][1]
        c.send_raw(encode_message(b"P", b"s2") + encode_message(b"S", b""))
        msgs = read_tags(c)
        assert b"".join(t for t, _ in msgs) == b"EZ"
        assert b"08P01" in msgs[0][1] and b"malformed Parse message" in msgs[0][1], msgs[0][1]
        # The session goes on.
        assert c.simple_query(lease_cmd(tenant_id, timeline_id, "0/2000000"))[0][0] is not None

    leases = ps.http_client().timeline_get(tenant_id, timeline_id)["lsn_leases"]
    assert [lease["lsn"] for lease in leases] == ["0/2000000", "0/3000000"]


def test_lease_over_psycopg(timeline):
    ps, tenant_id, timeline_id = timeline
    dsn = f"host=127.0.0.1 port={ps.pg_port} user=cloud_admin dbname=postgres"
    q = lease_cmd(tenant_id, timeline_id, "0/2000000")
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        # Simple protocol (no parameters).
        (ms,) = conn.execute(q).fetchone()
        check_valid_until(ms)
        # Extended protocol: prepared, text and binary results.
        for _ in range(2):
            cur = conn.execute(q, prepare=True)
            assert [(d.name, d.type_code) for d in cur.description] == [("valid_until", 25)]
            check_valid_until(cur.fetchone()[0])
        with conn.cursor(binary=True) as cur:
            cur.execute(q)
            check_valid_until(cur.fetchone()[0])
        refused = conn.execute(lease_cmd(tenant_id, timeline_id, "0/10"), prepare=True).fetchone()
        assert refused == (None,)
        # Parameters are refused with a message naming them; the session goes on.
        with pytest.raises(psycopg.errors.ProtocolViolation, match="parameter"):
            conn.execute("lease lsn %s %s %s", (tenant_id, timeline_id, "0/2000000"))
        with pytest.raises(psycopg.errors.FeatureNotSupported, match="unsupported command 'SELECT'"):
            conn.execute("SELECT 1", prepare=True)
        other = os.urandom(16).hex()
        with pytest.raises(psycopg.Error, match="not found"):
            conn.execute(lease_cmd(tenant_id, other, "0/2000000"))
        check_valid_until(conn.execute(q).fetchone()[0])


def test_leases_survive_a_restart_and_expired_ones_go(timeline):
    ps, tenant_id, timeline_id = timeline
    http = ps.http_client()
    path = f"/v1/tenant/{tenant_id}/timeline/{timeline_id}/lsn_lease"
    resp = http._json("POST", path, json={"lsn": "0/2000000"})
    assert resp["valid_until"].endswith("Z"), resp
    with ps.libpq(user="cloud_admin") as c:
        held_ms = check_valid_until(c.simple_query(lease_cmd(tenant_id, timeline_id, "0/3000000"))[0][0])
    before = http.timeline_get(tenant_id, timeline_id)["lsn_leases"]
    assert [lease["lsn"] for lease in before] == ["0/2000000", "0/3000000"]
    assert http.metrics().value("pageserver_valid_lsn_leases") == 2

    # An LSN below the history is a 400 naming it.
    with pytest.raises(PageserverApiError, match="below the history") as err:
        http.request("POST", path, json={"lsn": "0/100"})
    assert err.value.status == 400

    # A crash (no shutdown flush) keeps what was acknowledged.
    ps.stop(immediate=True)
    ps.start()
    assert http.timeline_get(tenant_id, timeline_id)["lsn_leases"] == before
    assert http.metrics().value("pageserver_valid_lsn_leases") == 2
    with ps.libpq(user="cloud_admin") as c:
        renewed = int(c.simple_query(lease_cmd(tenant_id, timeline_id, "0/3000000"))[0][0])
        assert renewed >= held_ms

    # With a short lease length, leases expire: after a restart they are gone.
    ps.stop()
    ps.start(extra_overrides={"lsn_lease_length": "1 s"})
    r = http._json("POST", path, json={"lsn": "0/4000000"})
    assert [lease["lsn"] for lease in http.timeline_get(tenant_id, timeline_id)["lsn_leases"]] == [
        "0/2000000",
        "0/3000000",
        "0/4000000",
    ]
    time.sleep(1.5)
    ps.stop()
    ps.start()
    leases = http.timeline_get(tenant_id, timeline_id)["lsn_leases"]
    assert [lease["lsn"] for lease in leases] == ["0/2000000", "0/3000000"], leases
