"""No client can exhaust the daemon: authentication timeout, connection and
request limits with descriptors kept for the management API, waiters
released when their client leaves, bounded echo of client input, escaped
log lines."""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from pathlib import Path

import pytest
import requests

from fixtures.libpq import LibpqConnection, ServerError, encode_message, parse_error_fields, startup_message
from fixtures.pagestream import GetPageRequest, Header, RelTag

REPO = Path(__file__).resolve().parents[2]
JWT_PUBLIC_KEY = REPO / "pageserver" / "tests" / "data" / "jwt_a_public.pem"


def read_fatal(sock: socket.socket, timeout: float) -> tuple[dict[str, str] | None, float]:
    """Waits for the server to end the connection: (fields of its
    ErrorResponse if it sent one, seconds until EOF)."""
    sock.settimeout(timeout)
    start = time.monotonic()
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            break
        data += chunk
    elapsed = time.monotonic() - start
    while data and data[:1] != b"E":
        (length,) = struct.unpack("!i", data[1:5])
        data = data[1 + length :]
    if not data:
        return None, elapsed
    (length,) = struct.unpack("!i", data[1:5])
    return parse_error_fields(data[5 : 1 + length]), elapsed


def metric(ps, name: str, **labels) -> float:
    return ps.http_client().metrics().value_or(name, 0.0, **labels)


def test_unauthenticated_connections_are_closed_after_the_timeout(pageserver_factory):
    ps = pageserver_factory.create(
        overrides={
            "authentication_timeout": "1 s",
            "pg_auth_type": "jwt",
            "auth_validation_public_key_path": str(JWT_PUBLIC_KEY),
        }
    ).start()
    ps.allow_errors(r"canceling authentication due to timeout")
    idle = socket.create_connection(("127.0.0.1", ps.pg_port))
    half = socket.create_connection(("127.0.0.1", ps.pg_port))
    half.sendall(struct.pack("!i", 40) + b"\x00\x03")  # a startup packet cut short
    no_password = socket.create_connection(("127.0.0.1", ps.pg_port))
    no_password.sendall(startup_message({"user": "postgres"}))
    for name, sock in [("idle", idle), ("half startup", half), ("no password", no_password)]:
        fields, elapsed = read_fatal(sock, timeout=10)
        assert fields is not None, f"{name}: closed without an error"
        assert fields["C"] == "08006" and "authentication_timeout" in fields["M"], (name, fields)
        assert elapsed < 5, f"{name}: closed after {elapsed:.1f}s"
        sock.close()
    assert metric(ps, "pageserver_page_service_auth_timeouts_total") == 3


def test_connection_limit_refuses_with_53300_and_http_keeps_answering(pageserver_factory):
    ps = pageserver_factory.create(
        overrides={"page_service_max_connections": 4, "http_max_connections": 3, "http_header_read_timeout": "1 s"}
    ).start()
    held = [LibpqConnection("127.0.0.1", ps.pg_port) for _ in range(4)]
    with pytest.raises(ServerError) as e:
        LibpqConnection("127.0.0.1", ps.pg_port)
    assert e.value.code == "53300" and "page_service_max_connections" in e.value.message, e.value
    assert ps.http_client().status()["status"] == "ok"
    assert metric(ps, "pageserver_page_service_refused_connections_total") == 1
    held.pop().close()
    deadline = time.monotonic() + 5
    while True:  # the slot is released when the server sees the close
        try:
            held.append(LibpqConnection("127.0.0.1", ps.pg_port))
            break
        except ServerError:
            assert time.monotonic() < deadline, "a closed connection's slot was not released"
            time.sleep(0.05)
    # HTTP: idle connections beyond the limit get a 503; once the idle ones
    # time out (no request headers within 1 s) the API answers again.
    idle = [socket.create_connection(("127.0.0.1", ps.http_port)) for _ in range(3)]
    time.sleep(0.2)
    resp = requests.get(f"http://127.0.0.1:{ps.http_port}/v1/status", timeout=5)
    assert resp.status_code == 503 and "http_max_connections" in resp.json()["msg"]
    for s in idle:
        _, elapsed = read_fatal(s, timeout=10)
        assert elapsed < 5
        s.close()
    assert ps.http_client().status()["status"] == "ok"
    for c in held:
        c.close()


@pytest.mark.parametrize("mode", ["serial", "pipelined", "pipelined-4-in-flight"])
def test_waiters_that_leave_are_released_within_a_second(pageserver_factory, mode):
    pipelining = {"mode": "serial"}
    if mode.startswith("pipelined"):
        pipelining = {"mode": "pipelined", "max_batch_size": 32, "execution": "concurrent-futures"}
    if mode == "pipelined-4-in-flight":
        pipelining["max_batches_in_flight"] = 4
    ps = pageserver_factory.create(overrides={"page_service_pipelining": pipelining}).start()
    http = ps.http_client()
    tenant = http.tenant_create()
    timeline = http.timeline_create(tenant)["timeline_id"]
    future_lsn = 0x10_0000_0000
    rel = RelTag(1663, 5, 16384, 0)
    clients = []
    for _ in range(50):
        c = ps.pagestream(tenant, timeline)
        c.send(GetPageRequest(rel, 0, Header(1, future_lsn, 0)))
        clients.append(c)
    time.sleep(0.3)
    assert metric(ps, "pageserver_live_connections", pageserver_connection_kind="page_service") == 50
    for c in clients:
        c.conn.close()
    left = time.monotonic()
    while metric(ps, "pageserver_live_connections", pageserver_connection_kind="page_service") > 0:
        assert time.monotonic() - left < 1.0, "waiters outlived their clients"
        time.sleep(0.02)
    assert close_wait_sockets(ps.pg_port) == 0


def close_wait_sockets(port: int) -> int:
    """Sockets of local port `port` in CLOSE-WAIT (/proc/net/tcp state 08)."""
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in open(table).read().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if int(local.split(":")[1], 16) == port and state == "08":
                n += 1
    return n


def test_huge_invalid_bodies_are_answered_briefly_and_memory_stays_bounded(pageserver):
    ps = pageserver
    url = f"http://127.0.0.1:{ps.http_port}/v1/tenant"
    big = b'{"new_tenant_id": "' + b"x" * (60 << 20) + b'"}'
    rss_before = rss_kib(ps.proc.pid)

    def post(out: list):
        out.append(requests.post(url, data=big, headers={"content-type": "application/json"}, timeout=60))

    results: list = []
    threads = [threading.Thread(target=post, args=(results,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        assert r.status_code == 413, r.status_code
        assert len(r.content) < 64 * 1024
    # An invalid value just under the body limit: quoted by prefix, with its length.
    near = b'{"new_tenant_id": "' + b"y" * 900_000 + b'"}'
    r = requests.post(url, data=near, timeout=60)
    assert r.status_code == 400 and len(r.content) < 2048, (r.status_code, len(r.content))
    assert "900000 bytes" in r.json()["msg"], r.json()
    assert max(len(line) for line in ps.log_lines()) < 4096
    growth_mib = (rss_kib(ps.proc.pid) - rss_before) / 1024
    assert growth_mib < 64, f"RSS grew by {growth_mib:.0f} MiB"


def rss_kib(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_client_values_cannot_forge_log_lines(pageserver):
    ps = pageserver
    forged = "abc%0A2026-01-01T00:00:00.000000Z%20ERROR%20forged%20line%00end"
    r = requests.delete(f"http://127.0.0.1:{ps.http_port}/v1/tenant/{forged}", timeout=10)
    assert r.status_code == 400
    assert "\n" not in r.json()["msg"] and "\x00" not in r.json()["msg"]
    time.sleep(0.2)
    lines = ps.log_lines()
    assert not any(line.startswith("2026-01-01T00:00:00.000000Z") for line in lines), "a forged line"
    assert not any("\x00" in line for line in lines)
    assert any("abc\\n2026-01-01" in line for line in lines), "the path is logged, escaped"


def test_unsupported_queries_are_quoted_by_prefix(pageserver):
    with LibpqConnection("127.0.0.1", pageserver.pg_port) as c:
        with pytest.raises(ServerError) as e:
            c.simple_query("x" * 60_000)
        assert len(e.value.message) < 300 and "(60000 bytes)" in e.value.message, e.value.message
        with pytest.raises(ServerError) as e:
            c.simple_query("bad\x1bquery\x01")
        assert "bad\\u{1b}query\\u{1}" in e.value.message, e.value.message
        assert c.simple_query("") == []


def test_config_file_must_be_a_bounded_regular_file(pageserver_factory):
    ps = pageserver_factory.create()
    ps.config_file = Path("/dev/zero")
    start = time.monotonic()
    code, out = ps.run_expect_failure(timeout=10)
    assert code != 0 and "/dev/zero" in out and "not a regular file" in out, out
    assert time.monotonic() - start < 5
    ps.config_file = None
    code, out = ps.run_expect_failure(raw_overrides=['page_service_pipelining={mode="serial", max_batch_size=4}'])
    assert code != 0 and "page_service_pipelining" in out and "max_batch_size" in out, out


def test_a_second_daemon_cannot_share_the_workdir(pageserver_factory, test_output_dir):
    first = pageserver_factory.create().start()
    link = test_output_dir / "workdir-link"
    link.symlink_to(first.workdir)
    for workdir in (first.workdir, link):
        second = pageserver_factory.create(name=f"second-{workdir.name}")
        second.workdir = workdir
        code, out = second.run_expect_failure(timeout=10)
        assert code != 0 and "cannot lock workdir" in out, out
    assert first.http_client().status()["status"] == "ok"
