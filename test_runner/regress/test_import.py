"""Base-backup import: every page of a real PostgreSQL cluster is served byte
for byte; bad input is refused cleanly and leaves nothing behind."""

from __future__ import annotations

import io
import os
import tarfile

import pytest

from fixtures.compare import compare_all, import_backup
from fixtures.http import PageserverApiError
from fixtures.pagestream import parse_lsn


def rel_blocks_from_keyspace(keyspace: dict) -> set[tuple[int, int, int, int, int]]:
    """(spc, db, rel, fork, blk) of every relation block key in a keyspace answer."""
    out = set()
    for start, end in keyspace["keys"]:
        s, e = int(start, 16), int(end, 16)
        k = s
        while k < e:
            f1 = k >> 136
            f2 = (k >> 104) & 0xFFFFFFFF
            f3 = (k >> 72) & 0xFFFFFFFF
            f4 = (k >> 40) & 0xFFFFFFFF
            f5 = (k >> 32) & 0xFF
            f6 = k & 0xFFFFFFFF
            if f1 == 0 and f4 != 0 and f6 != 0xFFFFFFFF:
                # Consume this (rel, fork) run in one step.
                run_end = min(e, (k | 0xFFFFFFFF))
                out.update((f2, f3, f4, f5, b) for b in range(f6, f6 + (run_end - k)))
                k = run_end
            else:
                k += 1
    return out


def test_import_pgbench_serves_every_page(pageserver, pgbench_backup):
    """`pgbench -i -s 10`, pg_basebackup -Ft -X none, import: every block of
    every relation fork, every size, db size and SLRU segment matches."""
    tl = import_backup(pageserver, pgbench_backup)
    info = pageserver.http_client().timeline_get(tl.tenant_id, tl.timeline_id)
    assert parse_lsn(info["last_record_lsn"]) >= pgbench_backup.start_lsn
    assert info["disk_consistent_lsn"] == info["last_record_lsn"], "import returned before the data was durable"
    # Large relation files go straight to image layers, each page once: the
    # L0 of the import holds the small files and metadata only.
    assert info["image_bytes"] > 150 * 2**20, f"pgbench_accounts and its index are not in image layers: {info}"
    assert info["l0_bytes"] < info["image_bytes"] / 4, f"pages written twice (L0 and images): {info}"

    stats = compare_all(pageserver, tl, pgbench_backup, version=3)
    assert stats.pages > 15_000, "pgbench scale 10 should have well over 15k pages"
    assert stats.slru_segments >= 1

    # The keyspace endpoint lists exactly the relation blocks of the backup.
    ks = pageserver.http_client().keyspace(tl.tenant_id, tl.timeline_id)
    served = rel_blocks_from_keyspace(ks)
    expected = {(*rel, b) for rel in pgbench_backup.relations for b in range(pgbench_backup.nblocks(rel))}
    assert served == expected


@pytest.mark.parametrize("version", [2, 3])
def test_import_small_cluster_both_protocols(pageserver, small_backup, version):
    tl = import_backup(pageserver, small_backup)
    stats = compare_all(pageserver, tl, small_backup, version=version)
    assert stats.databases >= 3  # template1, template0/postgres, other


def test_import_malformed_tar_is_refused(pageserver, small_backup):
    http = pageserver.http_client()
    tenant = http.tenant_create()
    timeline = os.urandom(16).hex()
    bad = pageserver.workdir.parent / "bad.tar"
    bad.write_bytes(b"this is not a tar archive" * 100)
    with pytest.raises(PageserverApiError) as e:
        http.import_basebackup(tenant, timeline, str(bad))
    assert e.value.status == 400, e.value
    assert e.value.msg, "a 400 must explain what is wrong"
    with pytest.raises(PageserverApiError) as e:
        http.timeline_get(tenant, timeline)
    assert e.value.status == 404
    assert not pageserver.temp_files()

    # A tar cut in the middle of a relation file.
    truncated = pageserver.workdir.parent / "truncated.tar"
    with open(small_backup.path, "rb") as src:
        truncated.write_bytes(src.read(os.path.getsize(small_backup.path) // 2 + 777))
    with pytest.raises(PageserverApiError) as e:
        http.import_basebackup(tenant, timeline, str(truncated))
    assert e.value.status == 400, e.value
    with pytest.raises(PageserverApiError) as e:
        http.timeline_get(tenant, timeline)
    assert e.value.status == 404

    # The same timeline id can be imported correctly afterwards.
    http.import_basebackup(tenant, timeline, str(small_backup.path))
    from fixtures.compare import ImportedTimeline

    compare_all(pageserver, ImportedTimeline(tenant, timeline), small_backup)
    pageserver.allow_errors(r"(?i)import", r"(?i)tar")


def test_import_without_pg_control_is_refused(pageserver, small_backup):
    """A tar with only some relation files is not a base backup."""
    http = pageserver.http_client()
    tenant = http.tenant_create()
    partial = pageserver.workdir.parent / "partial.tar"
    with tarfile.open(small_backup.path) as src, tarfile.open(partial, "w") as dst:
        for m in src:
            if m.name.startswith("base/") and m.isfile():
                dst.addfile(m, src.extractfile(m))
                break
    with pytest.raises(PageserverApiError) as e:
        http.import_basebackup(tenant, os.urandom(16).hex(), str(partial))
    assert e.value.status == 400, e.value
    pageserver.allow_errors(r"(?i)import", r"(?i)tar", r"(?i)pg_control")


def test_import_into_existing_timeline_conflicts(pageserver, small_backup):
    tl = import_backup(pageserver, small_backup)
    with pytest.raises(PageserverApiError) as e:
        pageserver.http_client().import_basebackup(tl.tenant_id, tl.timeline_id, str(small_backup.path))
    assert e.value.status == 409, e.value
    pageserver.allow_errors(r"(?i)already exists")


def test_import_unknown_tenant_is_404(pageserver, small_backup):
    with pytest.raises(PageserverApiError) as e:
        pageserver.http_client().import_basebackup(os.urandom(16).hex(), os.urandom(16).hex(), str(small_backup.path))
    assert e.value.status == 404


def test_import_empty_body_is_refused(pageserver):
    http = pageserver.http_client()
    tenant = http.tenant_create()
    with pytest.raises(PageserverApiError) as e:
        http.request("PUT", f"/v1/tenant/{tenant}/timeline/{os.urandom(16).hex()}/import_basebackup", data=io.BytesIO(b""))
    assert e.value.status == 400
    pageserver.allow_errors(r"(?i)import", r"(?i)tar")
