"""Branches at an LSN (`docs/branches.md`): a branch of a followed primary's
timeline at an old LSN serves that LSN's pages (equal to the primary's files
then, checksums valid) while rows change after it; it survives compaction
and GC of its ancestor and kill -9 of the daemon; an unmodified PostgreSQL
starts on its fullbackup with the rows of that moment; it then follows the
primary from its branch point on a slot of its own; deleting its ancestor
is refused, deleting the tenant deletes both. With remote storage, another
pageserver that attaches the tenant serves the branch."""

from __future__ import annotations

import os
import tarfile

import pytest

from fixtures.backup import fetch_backup, restore, table_checksums
from fixtures.compare import ImportedTimeline, compare_all, import_backup
from fixtures.http import PageserverApiError
from fixtures.utils import fmt_lsn
from fixtures.pagestream import GetPageResponse
from fixtures.remote import newest_index, remote_pageserver, wait_attached, wait_uploaded
from fixtures.vanilla_pg import started_primary
from fixtures.wal_compare import compare_slru_with_primary, compare_with_primary, follow_primary, relation_files
from test_wal_ingest import PRIMARY_GONE, PRIMARY_SETTINGS, assert_matches, checkpoint_lsn, wait_for_lsn

# Maintenance only when the test asks for it, GC by `gc_horizon` alone.
MANUAL = {"compaction_period": "0 s", "gc_period": "0 s", "pitr_interval": "0 s", "compaction_threshold": 2}


@pytest.fixture(params=[15, 18], ids=lambda v: f"pg{v}")
def primary(request, test_output_dir, port_distributor):
    yield from started_primary(request.param, test_output_dir, port_distributor.get(), {**PRIMARY_SETTINGS, "wal_compression": "pglz"}, checksums=True)


def branch_pages(ps, tenant: str, timeline: str, rels: dict, lsn: int) -> dict:
    """(rel, blkno) -> page of every block of `rels` at `lsn`."""
    out = {}
    with ps.pagestream(tenant, timeline) as c:
        for rel, nblocks in sorted(rels.items(), key=lambda kv: str(kv[0])):
            pages = [(rel, b) for b in range(nblocks)]
            for key, resp in c.get_pages_pipelined(pages, lsn=lsn):
                assert isinstance(resp, GetPageResponse), f"{timeline} {key}: {resp}"
                out[key] = resp.page
    return out


def assert_same_pages(ps, tenant: str, timeline: str, golden: dict, rels: dict, lsn: int, what: str) -> None:
    got = branch_pages(ps, tenant, timeline, rels, lsn)
    differ = [k for k in golden if got.get(k) != golden[k]]
    assert not differ, f"{what}: {len(differ)} of {len(golden)} pages differ, e.g. {differ[:5]}"


def refused(http, tenant: str, body: dict, status: int, fragment: str) -> None:
    with pytest.raises(PageserverApiError) as e:
        http._json("POST", f"/v1/tenant/{tenant}/timeline", json=body)
    assert e.value.status == status and fragment in e.value.msg, e.value


def test_branch_at_old_lsn(pageserver_factory, primary, test_output_dir, port_distributor):
    pg, major = primary, primary.major
    ps = pageserver_factory.create(overrides=MANUAL).start()
    http, tenant, main = follow_primary(ps, pg, PRIMARY_GONE)
    pg.pgbench_init(1)
    pg.psql("CREATE TABLE kept (id int PRIMARY KEY, v text); INSERT INTO kept SELECT g, md5(g::text) FROM generate_series(1, 3000) g")
    # A slot holding WAL from before the branch point, for the branch to follow.
    pg.psql("SELECT pg_create_physical_replication_slot('branch_slot', true)")
    rows_then = table_checksums(pg)  # before the pause: reads may prune pages
    lsn = checkpoint_lsn(pg)
    wait_for_lsn(http, tenant, main, lsn)
    rels = relation_files(pg.datadir)

    branch = os.urandom(16).hex()
    body = {"new_timeline_id": branch, "ancestor_timeline_id": main, "ancestor_start_lsn": fmt_lsn(lsn)}
    info = http._json("POST", f"/v1/tenant/{tenant}/timeline", json=body)
    assert (info["ancestor_timeline_id"], info["ancestor_lsn"]) == (main, fmt_lsn(lsn)), info
    assert info["last_record_lsn"] == info["initial_lsn"] == fmt_lsn(lsn), info
    assert http.timeline_get(tenant, main)["ancestor_timeline_id"] is None
    ps.kill()  # right after the creation was acknowledged
    ps.start()
    assert http.timeline_get(tenant, branch)["ancestor_lsn"] == fmt_lsn(lsn)
    res = compare_with_primary(ps, tenant, branch, pg, lsn, checksums=True)
    compare_slru_with_primary(ps, tenant, branch, pg, lsn, res)
    assert res.pages > 100 and res.slru_segments >= 1, res
    assert not res.mismatches, "\n".join(res.mismatches[:40])
    golden = branch_pages(ps, tenant, branch, rels, lsn)
    lease = http._json("POST", f"/v1/tenant/{tenant}/timeline/{branch}/lsn_lease", json={"lsn": fmt_lsn(lsn)})
    assert lease["valid_until"], lease
    base = fetch_backup(ps, "basebackup", tenant, branch, test_output_dir / "branch_base.tar", fmt_lsn(lsn))
    with tarfile.open(base) as t:
        names = t.getnames()  # the ancestor's directories, listed through the branch
        maps = [n for n in names if n.startswith("base/") and n.endswith("/pg_filenode.map")]
        assert "global/pg_control" in names and len(maps) >= 3, names[:20]
    assert_same_pages(ps, tenant, main, golden, rels, lsn, "the ancestor at the branch point")

    # Rows change after the branch point; the branch does not see them.
    pg.psql("UPDATE kept SET v = 'changed' WHERE id % 2 = 0; DELETE FROM kept WHERE id > 2500; CREATE TABLE later AS SELECT 1 x")
    pg.run("pgbench", "-n", "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres", "-t", "300", "postgres")
    wait_for_lsn(http, tenant, main, checkpoint_lsn(pg))
    http.timeline_checkpoint(tenant, main)
    http.timeline_compact(tenant, main, force_l0=True, force_images=True)
    gc = http.timeline_gc(tenant, main, gc_horizon=0)
    assert gc["gc_cutoff"] == fmt_lsn(lsn), f"GC of the ancestor must stop at the branch point: {gc}"
    assert_same_pages(ps, tenant, branch, golden, rels, lsn, "after compaction and GC of the ancestor")
    ps.kill()
    ps.start()
    assert_same_pages(ps, tenant, branch, golden, rels, lsn, "after kill -9 following GC")

    # An unmodified PostgreSQL on the branch's fullbackup has the rows of then.
    tar = fetch_backup(ps, "fullbackup", tenant, branch, test_output_dir / "branch_full.tar", fmt_lsn(lsn))
    restored = restore(tar, test_output_dir / "restored", port_distributor.get(), major)
    restored.start()
    try:
        assert table_checksums(restored) == rows_then
    finally:
        restored.stop(mode="immediate")
        restored.remove()

    refused(http, tenant, {"ancestor_timeline_id": os.urandom(16).hex()}, 404, "ancestor timeline")
    refused(http, tenant, {"ancestor_timeline_id": main, "ancestor_start_lsn": "FF/0"}, 400, "above what ancestor")
    refused(http, tenant, {"ancestor_timeline_id": main, "ancestor_start_lsn": "0/10"}, 400, "first readable LSN")
    refused(http, tenant, {"new_timeline_id": branch, "ancestor_timeline_id": main}, 409, "already exists")
    refused(http, tenant, {"ancestor_timeline_id": main, "pg_version": major}, 400, "pg_version")
    with pytest.raises(PageserverApiError) as e:
        http.timeline_delete(tenant, main)
    assert e.value.status == 409 and branch in e.value.msg, e.value

    # The branch follows the primary from its branch point: its pages are
    # the primary's own now.
    connstring = f"postgres://postgres@127.0.0.1:{pg.port}/postgres"
    src = {"connstring": connstring, "slot": "branch_slot"}
    info = http._json("PUT", f"/v1/tenant/{tenant}/timeline/{branch}/source", json=src)
    assert info["wal_source"]["slot"] == "branch_slot"
    assert_matches(ps, tenant, branch, pg, "the branch after following the primary")
    http.tenant_delete(tenant)
    assert not list((ps.workdir / "tenants").glob(f"{tenant}*"))


def test_attach_elsewhere_serves_the_branch(pageserver_factory, minio, small_backup):
    """The branch's index names its ancestor; a pageserver that attaches the
    tenant from the bucket loads the ancestor first and serves the branch."""
    ps1 = remote_pageserver(pageserver_factory, minio, "ps1")
    tl = import_backup(ps1, small_backup)
    http1 = ps1.http_client()
    main = http1.timeline_get(tl.tenant_id, tl.timeline_id)
    branch = os.urandom(16).hex()
    body = {"new_timeline_id": branch, "ancestor_timeline_id": tl.timeline_id}
    http1._json("POST", f"/v1/tenant/{tl.tenant_id}/timeline", json=body)
    for timeline in (tl.timeline_id, branch):
        wait_uploaded(http1, tl.tenant_id, timeline)
    index = newest_index(minio, tl.tenant_id, branch)
    assert (index["ancestor_timeline_id"], index["ancestor_lsn"]) == (tl.timeline_id, main["last_record_lsn"]), index
    assert "ancestor_timeline_id" not in newest_index(minio, tl.tenant_id, tl.timeline_id)
    ps1.stop()

    ps2 = remote_pageserver(pageserver_factory, minio, "ps2")
    http2 = ps2.http_client()
    http2.tenant_attach(tl.tenant_id, 2)
    info = wait_attached(http2, tl.tenant_id, branch)
    assert info["state"] == "Active" and info["ancestor_timeline_id"] == tl.timeline_id, info
    compare_all(ps2, ImportedTimeline(tl.tenant_id, branch), small_backup)


@pytest.mark.failpoints
def test_crash_during_branch_creation(pageserver_factory, testing_pageserver_bin, small_backup):
    """A crash (`exit`) before the branch's directory is renamed into place
    leaves no branch (and a retry works); after it, a whole one."""
    ps = pageserver_factory.create(binary=testing_pageserver_bin).start()
    ps.allow_errors(r"(?i)failpoint")
    tl = import_backup(ps, small_backup)
    http = ps.http_client()
    for failpoint, survives in [("branch-create::before-rename", False), ("branch-create::after-rename", True)]:
        branch = os.urandom(16).hex()
        http.configure_failpoints({failpoint: "exit"})
        body = {"new_timeline_id": branch, "ancestor_timeline_id": tl.timeline_id}
        with pytest.raises(Exception):  # noqa: B017 - the connection dies with the daemon
            http._json("POST", f"/v1/tenant/{tl.tenant_id}/timeline", json=body)
        ps.stop()  # reap the exited daemon
        ps.start()
        assert not ps.temp_files(), f"temporary files after a crash at {failpoint}: {ps.temp_files()}"
        if not survives:
            with pytest.raises(PageserverApiError) as e:
                http.timeline_get(tl.tenant_id, branch)
            assert e.value.status == 404, e.value
            assert not list(ps.workdir.rglob(branch + "*")), f"leftovers of the branch after {failpoint}"
            http._json("POST", f"/v1/tenant/{tl.tenant_id}/timeline", json=body)
        assert http.timeline_get(tl.tenant_id, branch)["ancestor_timeline_id"] == tl.timeline_id
        compare_all(ps, ImportedTimeline(tl.tenant_id, branch), small_backup)
