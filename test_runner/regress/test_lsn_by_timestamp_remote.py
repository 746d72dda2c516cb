"""The commit-time index moves with the tenant: a pageserver following a
primary uploads it with its layers (more than two full segments: 34,000
transactions between commits at known times), loses its disk, and a second
pageserver that attaches the tenant from the bucket answers
`get_lsn_by_timestamp` and `get_timestamp_of_lsn` exactly as the first did,
for old and new times, right after the attach; an unmodified PostgreSQL
started on its `fullbackup` at an answered LSN has the rows committed by
then.

Branches answer from their ancestor below the branch point (recursively),
never with an ancestor's LSN above it."""

from __future__ import annotations

import os
import re
import shutil
from datetime import datetime, timedelta, timezone

import pytest

from fixtures.http import PageserverApiError
from fixtures.pagestream import parse_lsn
from fixtures.remote import gen_suffix, newest_index, remote_pageserver, timeline_prefix, wait_attached, wait_uploaded
from fixtures.utils import fmt_lsn
from fixtures.vanilla_pg import started_primary
from fixtures.wal_compare import follow_primary
from test_lsn_by_timestamp import MANUAL, commit_marks, lsn_by_time, rows_at, time_of_lsn
from test_wal_ingest import PRIMARY_GONE, wait_for_lsn

# segment.rs: a sealed segment holds this many transactions.
SEGMENT_ENTRIES = 16384
BULK_COMMITS = 2 * SEGMENT_ENTRIES + 1200
# A pageserver that attaches a followed timeline may connect while the
# primary's walsender of the killed one still holds the slot.
SLOT_BUSY = r"replication failed: .*replication slot \S+ is active for PID"


@pytest.fixture(params=[15, 18], ids=lambda v: f"pg{v}")
def primary(request, test_output_dir, port_distributor):
    yield from started_primary(request.param, test_output_dir, port_distributor.get(), {"max_replication_slots": "4", "autovacuum": "off"})


def present_lsns(http, tenant, timeline, points) -> list[int]:
    lsns = []
    for k, (between, before, after) in enumerate(points, start=1):
        kind, lsn = lsn_by_time(http, tenant, timeline, between)
        assert kind == "present" and before < lsn <= after, f"commit {k}: {kind} {fmt_lsn(lsn)}"
        lsns.append(lsn)
    return lsns


def test_commit_times_survive_losing_the_disk(pageserver_factory, minio, primary, test_output_dir, port_distributor):
    pg = primary
    ps1 = remote_pageserver(pageserver_factory, minio, "ps1", **MANUAL)
    http1, tenant, tl = follow_primary(ps1, pg, PRIMARY_GONE)
    pg.psql("CREATE TABLE marks (id int, at timestamptz)")
    pg.psql("CREATE TABLE bulk (i int)")
    pg.psql(
        "CREATE PROCEDURE many_commits(n int) LANGUAGE plpgsql AS "
        "$$ BEGIN FOR i IN 1..n LOOP INSERT INTO bulk VALUES (i); COMMIT; END LOOP; END $$"
    )
    start = datetime.now(timezone.utc)
    points = commit_marks(pg, [1, 2, 3])
    pg.psql(f"CALL many_commits({BULK_COMMITS})")
    points += commit_marks(pg, [4, 5, 6])
    wait_for_lsn(http1, tenant, tl, parse_lsn(pg.psql("SELECT pg_current_wal_insert_lsn()")))
    lsns = present_lsns(http1, tenant, tl, points)

    http1.timeline_checkpoint(tenant, tl)
    wait_uploaded(http1, tenant, tl)
    index = newest_index(minio, tenant, tl)
    segments = index["commit_times"]["segments"]
    assert index["commit_times"]["version"] == 1 and len(segments) >= 3, list(segments)
    # Probes: each mark, times inside the bulk (those of transactions
    # spread over it, and just after them), and long before everything.
    probes = [p[0] for p in points] + [start - timedelta(days=365)]
    step = (points[3][1] - points[2][2]) // 8
    for i in range(1, 8):
        t = time_of_lsn(http1, tenant, tl, points[2][2] + i * step)
        probes += [t, t + timedelta(microseconds=1)]
    answers = [lsn_by_time(http1, tenant, tl, t) for t in probes]
    times = [time_of_lsn(http1, tenant, tl, lsn) for lsn in lsns]

    ps1.kill()
    shutil.rmtree(ps1.workdir)
    ps2 = remote_pageserver(pageserver_factory, minio, "ps2", **MANUAL)
    ps2.allow_errors(*PRIMARY_GONE, SLOT_BUSY)
    http2 = ps2.http_client()
    # A damaged segment object (the oldest: sealed, listed by every index
    # since) refuses the attach, naming it; repaired, the attach goes on.
    name, seg = sorted(newest_index(minio, tenant, tl)["commit_times"]["segments"].items())[0]
    key = timeline_prefix(tenant, tl) + f"{name}-{gen_suffix(seg['generation'])}"
    ps2.allow_errors(re.escape(name))
    good = minio.get(minio.bucket, key)
    minio.put(minio.bucket, key, good[:-1] + bytes([good[-1] ^ 0xFF]))
    with pytest.raises(PageserverApiError) as e:
        http2.tenant_attach(tenant, 2)
    assert e.value.status == 409 and key in e.value.msg and "damaged" in e.value.msg, e.value
    minio.put(minio.bucket, key, good)
    http2.tenant_attach(tenant, 2)
    wait_attached(http2, tenant, tl)
    # Right after the attach, from the downloaded index alone.
    got = [lsn_by_time(http2, tenant, tl, t) for t in probes]
    diffs = [(str(t), a, b) for t, a, b in zip(probes, answers, got) if a != b]
    assert not diffs, f"answers differ after the attach: {diffs}"
    assert [time_of_lsn(http2, tenant, tl, lsn) for lsn in lsns] == times
    # The data at an old and a new answer.
    for k in (2, 5):
        rows = rows_at(ps2, tenant, tl, lsns[k - 1], pg.major, test_output_dir, port_distributor.get())
        assert rows == list(range(1, k + 1)), f"PostgreSQL {pg.major} at commit {k} after the attach: rows {rows}"

    check_branches(http2, tenant, tl, points, lsns, start)


def check_branches(http, tenant, tl, points, lsns, start):
    """A branch at commit 2 (and a branch of it there) answers from the
    ancestor below its branch point, never above it, and always with an LSN
    the branch restores: at least the branch point."""
    point = lsns[1]
    branch, sub = os.urandom(16).hex(), os.urandom(16).hex()
    for new, ancestor in ((branch, tl), (sub, branch)):
        body = {"new_timeline_id": new, "ancestor_timeline_id": ancestor, "ancestor_start_lsn": fmt_lsn(point)}
        http._json("POST", f"/v1/tenant/{tenant}/timeline", json=body)
    assert lsn_by_time(http, tenant, tl, points[0][0]) == ("present", lsns[0])
    for b in (branch, sub):
        # Between commits 1 and 2 is the ancestor's moment: the branch point
        # already holds commit 2.
        assert lsn_by_time(http, tenant, b, points[0][0]) == ("past", point), b
        assert lsn_by_time(http, tenant, b, start - timedelta(days=365)) == ("past", point), b
        # Commit 2 is the last the branch has: every later time is "future" at it.
        assert lsn_by_time(http, tenant, b, points[1][0]) == ("future", point), b
        assert lsn_by_time(http, tenant, b, points[5][0]) == ("future", point), b
        assert time_of_lsn(http, tenant, b, point) == time_of_lsn(http, tenant, tl, point), b
    # The ancestor itself goes on past the branch point.
    assert lsn_by_time(http, tenant, tl, points[5][0]) == ("present", lsns[5])
