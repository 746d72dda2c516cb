"""The IO engine at run time: `GET`/`PUT /v1/io_engine` switch every open
layer file between std-fs and io-uring, reads stay byte-for-byte right
under each, and a bad request changes nothing."""

from __future__ import annotations

import os

import pytest

from fixtures.compare import compare_all, import_backup
from fixtures.http import PageserverApiError


def test_switching_engines_keeps_every_page(pageserver, small_backup):
    client = pageserver.http_client()
    start = client.io_engine()
    assert start["io_engine"] == os.environ.get("PAGESERVER_IO_ENGINE", "std-fs")
    assert start["direct_io"] == (os.environ.get("PAGESERVER_DIRECT_IO") == "true")
    tl = import_backup(pageserver, small_backup)
    for engine in ["io-uring", "std-fs", "io-uring", start["io_engine"]]:
        assert client.set_io_engine(engine) == {"io_engine": engine, "direct_io": start["direct_io"]}
        assert client.io_engine()["io_engine"] == engine
        stats = compare_all(pageserver, tl, small_backup, version=3)
        assert stats.pages > 0


@pytest.mark.parametrize(
    "body, fragment",
    [('"carrier-pigeon"', "unknown variant"), ("42", "invalid request body"), ("", "invalid request body")],
)
def test_bad_engine_is_refused_and_nothing_changes(pageserver, body, fragment):
    client = pageserver.http_client()
    before = client.io_engine()
    with pytest.raises(PageserverApiError) as e:
        client.request("PUT", "/v1/io_engine", data=body, headers={"content-type": "application/json"})
    assert e.value.status == 400
    assert fragment in e.value.msg, e.value.msg
    assert client.io_engine() == before
