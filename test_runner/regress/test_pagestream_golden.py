"""The Python pagestream codec against the golden file the Rust codec is
checked against too (libs/pageserver_api/testdata/pagestream_golden.json):
every request encodes to its bytes, every response decodes to its fields,
v2 and v3. No daemon needed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures import pagestream as ps

GOLDEN = Path(__file__).resolve().parents[2] / "libs/pageserver_api/testdata/pagestream_golden.json"


def page(spec: dict) -> bytes:
    """The golden file's page rule: 8192 bytes of `fill`, 0xA5 first, 0x5A last."""
    p = bytearray([spec["fill"]]) * ps.PAGE_SIZE
    p[0], p[-1] = 0xA5, 0x5A
    return bytes(p)


def load():
    data = json.loads(GOLDEN.read_text())
    assert data["format"] == 1
    h = data["header"]
    return ps.Header(h["reqid"], h["request_lsn"], h["not_modified_since"]), data["entries"]


HDR, ENTRIES = load()


def build_request(name: str, f: dict):
    rel = ps.RelTag(*f["rel"]) if "rel" in f else None
    return {
        "Exists": lambda: ps.ExistsRequest(rel=rel, hdr=HDR),
        "Nblocks": lambda: ps.NblocksRequest(rel=rel, hdr=HDR),
        "GetPage": lambda: ps.GetPageRequest(rel=rel, blkno=f.get("blkno"), hdr=HDR),
        "DbSize": lambda: ps.DbSizeRequest(dbnode=f.get("dbnode"), hdr=HDR),
        "GetSlruSegment": lambda: ps.GetSlruSegmentRequest(kind=f.get("kind"), segno=f.get("segno"), hdr=HDR),
    }[name]()


def expected_response(name: str, f: dict, version: int):
    v3 = version == 3
    hdr = HDR if v3 else None
    rel = ps.RelTag(*f["rel"]) if v3 and "rel" in f else None
    if name == "Exists":
        return ps.ExistsResponse(exists=f["exists"], hdr=hdr, rel=rel)
    if name == "Nblocks":
        return ps.NblocksResponse(n_blocks=f["n_blocks"], hdr=hdr, rel=rel)
    if name == "GetPage":
        return ps.GetPageResponse(page=page(f["page"]), hdr=hdr, rel=rel, blkno=f["blkno"] if v3 else None)
    if name == "Error":
        return ps.ErrorResponse(message=f["message"], hdr=hdr)
    if name == "DbSize":
        return ps.DbSizeResponse(db_size=f["db_size"], hdr=hdr, dbnode=f["dbnode"] if v3 else None)
    if name == "GetSlruSegment":
        seg = b"".join(page(p) for p in f["pages"])
        return ps.GetSlruSegmentResponse(
            segment=seg, hdr=hdr, kind=f["kind"] if v3 else None, segno=f["segno"] if v3 else None
        )
    raise AssertionError(f"golden entry for an unknown response {name}")


def entry_id(e: dict) -> str:
    return f"{e['kind']}-{e['name']}-v{e['version']}"


def test_golden_file_covers_every_message():
    seen = {(e["kind"], e["name"], e["version"]) for e in ENTRIES}
    requests = {"Exists", "Nblocks", "GetPage", "DbSize", "GetSlruSegment"}
    responses = requests | {"Error"}
    want = {("request", n, v) for n in requests for v in (2, 3)} | {("response", n, v) for n in responses for v in (2, 3)}
    assert seen == want


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e["kind"] == "request"], ids=entry_id)
def test_request_encodes_to_golden_bytes(entry):
    req = build_request(entry["name"], entry["fields"])
    assert ps.encode_request(req, entry["version"]).hex() == entry["hex"]


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e["kind"] == "response"], ids=entry_id)
def test_response_decodes_from_golden_bytes(entry):
    got = ps.decode_response(bytes.fromhex(entry["hex"]), entry["version"])
    assert got == expected_response(entry["name"], entry["fields"], entry["version"])
