"""An import cut short says what happened, at the right level: the tenant
was deleted meanwhile (409), the client went away (INFO, not a server
ERROR), the client stopped sending (408 after http_body_read_timeout).
Nothing is left behind and the daemon serves on."""

from __future__ import annotations

import os
import socket
import time

from fixtures.pageserver import Pageserver


def start_import(ps: Pageserver, tenant: str, timeline: str, tar: bytes, first_bytes: int) -> socket.socket:
    """A chunked PUT of `tar` of which only `first_bytes` are sent."""
    sock = socket.create_connection(("127.0.0.1", ps.http_port))
    sock.sendall(
        (
            f"PUT /v1/tenant/{tenant}/timeline/{timeline}/import_basebackup HTTP/1.1\r\n"
            f"host: 127.0.0.1\r\ntransfer-encoding: chunked\r\n"
            f"content-type: application/x-tar\r\n\r\n"
        ).encode()
    )
    send_chunk(sock, tar[:first_bytes])
    return sock


def send_chunk(sock: socket.socket, data: bytes) -> None:
    sock.sendall(f"{len(data):x}\r\n".encode() + data + b"\r\n")


def read_response(sock: socket.socket, timeout: float = 30) -> tuple[int, str]:
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before a response: {data!r}"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    status = int(head.split(b" ")[1])
    length = next(
        (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), None
    )
    while length is not None and len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return status, body.decode(errors="replace")


def wait_for_log(ps: Pageserver, pattern: str, timeout: float = 10) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = ps.log_contains(pattern)
        if line:
            return line
        time.sleep(0.05)
    raise AssertionError(f"no log line matching {pattern!r}:\n{ps.log_tail()}")


def half_sent_import(ps: Pageserver, tar: bytes) -> tuple[str, str, socket.socket]:
    """(tenant, timeline, socket) of an import of which half the tar was sent."""
    tenant = ps.http_client().tenant_create()
    timeline = os.urandom(16).hex()
    sock = start_import(ps, tenant, timeline, tar, len(tar) // 2)
    time.sleep(0.3)
    return tenant, timeline, sock


def test_tenant_deleted_during_import_is_a_conflict_naming_it(pageserver, small_backup):
    ps = pageserver
    http = ps.http_client()
    tar = small_backup.path.read_bytes()
    tenant, _, sock = half_sent_import(ps, tar)
    http.tenant_delete(tenant)
    try:
        send_chunk(sock, tar[len(tar) // 2 :])
        sock.sendall(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server answered and closed first
    status, body = read_response(sock)
    sock.close()
    assert status == 409, (status, body)
    assert f"tenant {tenant} was deleted during the import" in body, body
    assert "shutting down" not in body
    assert http.status()["status"] == "ok"


def test_client_gone_mid_import_is_not_a_server_error(pageserver, small_backup):
    ps = pageserver
    http = ps.http_client()
    tenant, timeline, sock = half_sent_import(ps, small_backup.path.read_bytes())
    sock.close()
    line = wait_for_log(ps, "the client went away or the body broke off")
    assert " INFO " in line, line
    # Nothing was imported and the same import can be run again.
    assert http.tenant_get(tenant)["timelines"] == []
    http.import_basebackup(tenant, timeline, str(small_backup.path))
    # The teardown's log scan fails the test on any ERROR line.


def test_client_that_stops_sending_gets_408(pageserver_factory, small_backup):
    ps = pageserver_factory.create(overrides={"http_body_read_timeout": "1 s"}).start()
    http = ps.http_client()
    tenant = http.tenant_create()
    tar = small_backup.path.read_bytes()
    sock = start_import(ps, tenant, os.urandom(16).hex(), tar, 4096)
    start = time.monotonic()
    status, body = read_response(sock)
    sock.close()
    assert status == 408 and "http_body_read_timeout" in body, (status, body)
    assert time.monotonic() - start < 10
    assert http.tenant_get(tenant)["timelines"] == []
