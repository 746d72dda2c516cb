"""`basebackup` over the extended query protocol, as Neon's compute_ctl
sends it (tokio-postgres `copy_out`: Parse, Bind, Describe, Execute, Sync):
NoData, then COPY OUT of the same tar the simple protocol gives."""

from __future__ import annotations

import io
import struct
import tarfile

from fixtures.backup import fetch_backup
from fixtures.compare import import_backup
from fixtures.libpq import encode_message


def cstr(s: str) -> bytes:
    return s.encode() + b"\0"


def members(tar_bytes: bytes) -> dict[str, int]:
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as t:
        return {m.name: m.size for m in t.getmembers()}


def test_basebackup_over_the_extended_protocol(pageserver, small_backup, tmp_path):
    ps = pageserver
    tl = import_backup(ps, small_backup)
    command = f"basebackup {tl.tenant_id} {tl.timeline_id}"
    with ps.libpq() as c:
        c.send_raw(
            encode_message(b"P", cstr("") + cstr(command) + struct.pack("!h", 0))
            + encode_message(b"B", cstr("") + cstr("") + struct.pack("!hhh", 0, 0, 0))
            + encode_message(b"D", b"P" + cstr(""))
            + encode_message(b"E", cstr("") + struct.pack("!i", 0))
            + encode_message(b"S", b"")
        )
        tags, data = [], bytearray()
        while not tags or tags[-1] != b"Z":
            msg = c.read_message()
            assert msg is not None, f"EOF after {tags}"
            tag, body = msg
            if tag == b"d":
                data += body
            if not tags or tags[-1] != tag:
                tags.append(tag)
        assert b"".join(tags) == b"12nHdcCZ", tags
        # The session goes on.
        assert c.simple_query("") == []

    simple = fetch_backup(ps, "basebackup", tl.tenant_id, tl.timeline_id, tmp_path / "simple.tar")
    got = members(bytes(data))
    assert got == members(simple.read_bytes())
    assert "global/pg_control" in got, sorted(got)[:20]
