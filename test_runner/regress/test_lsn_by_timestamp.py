"""`get_lsn_by_timestamp` and `get_timestamp_of_lsn` on a timeline that
follows a live primary: transactions commit at known times (each records
`clock_timestamp()` in its row, and the time is read again after it
commits), and the LSN answered for a time between two commits holds exactly
the rows committed before it: it lies between the primary's WAL insert
positions around that time, and an unmodified PostgreSQL started on a
`fullbackup` at it sees exactly those rows. The answers survive a restart,
compaction and GC (above the GC cutoff), and each kind is seen."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from fixtures.backup import fetch_backup, restore
from fixtures.http import PageserverApiError
from fixtures.utils import fmt_lsn
from fixtures.pagestream import parse_lsn
from fixtures.vanilla_pg import started_primary
from fixtures.wal_compare import follow_primary
from test_wal_ingest import PRIMARY_GONE, wait_for_lsn

MANUAL = {"compaction_period": "0 s", "gc_period": "0 s", "pitr_interval": "0 s"}
COMMITS = 6


@pytest.fixture(params=[15, 18], ids=lambda v: f"pg{v}")
def primary(request, test_output_dir, port_distributor):
    yield from started_primary(request.param, test_output_dir, port_distributor.get(), {"max_replication_slots": "4", "autovacuum": "off"})


def pg_time(pg, expr: str = "clock_timestamp()", tail: str = "") -> datetime:
    """`expr` (a timestamptz) as the primary computes it, in UTC."""
    fmt = "'YYYY-MM-DD\"T\"HH24:MI:SS.US'"
    return datetime.fromisoformat(pg.psql(f"SELECT to_char(({expr}) AT TIME ZONE 'UTC', {fmt}) {tail}") + "+00:00")


def rfc3339(t: datetime) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lsn_by_time(http, tenant, timeline, t: datetime | str) -> tuple[str, int]:
    ts = t if isinstance(t, str) else rfc3339(t)
    r = http._json("GET", f"/v1/tenant/{tenant}/timeline/{timeline}/get_lsn_by_timestamp", params={"timestamp": ts})
    assert set(r) == {"lsn", "kind"}, r
    return r["kind"], parse_lsn(r["lsn"])


def time_of_lsn(http, tenant, timeline, lsn: int) -> datetime:
    r = http._json("GET", f"/v1/tenant/{tenant}/timeline/{timeline}/get_timestamp_of_lsn", params={"lsn": fmt_lsn(lsn)})
    return datetime.fromisoformat(r.replace("Z", "+00:00"))


def commit_at_known_times(pg) -> list[tuple[datetime, int, int]]:
    """Per commit k (1..COMMITS): see `commit_marks`."""
    pg.psql("CREATE TABLE marks (id int, at timestamptz)")
    return commit_marks(pg, range(1, COMMITS + 1))


def commit_marks(pg, ids) -> list[tuple[datetime, int, int]]:
    """Per id, a row of `marks` committed: (a time after its commit and
    before the next transaction, the WAL insert position before it, and
    after it). A rolled-back transaction (an abort record) follows each."""
    points = []
    for k in ids:
        before = parse_lsn(pg.psql("SELECT pg_current_wal_insert_lsn()"))
        pg.psql(f"INSERT INTO marks VALUES ({k}, clock_timestamp())")
        between = pg_time(pg)
        after = parse_lsn(pg.psql("SELECT pg_current_wal_insert_lsn()"))
        pg.psql(f"BEGIN; INSERT INTO marks VALUES ({-k}, now()); ROLLBACK")
        points.append((between, before, after))
    return points


def check_answers(http, tenant, timeline, pg, points, what: str) -> list[int]:
    lsns = []
    for k, (between, before, after) in enumerate(points, start=1):
        kind, lsn = lsn_by_time(http, tenant, timeline, between)
        assert kind == "present", f"{what}: commit {k}: {kind}"
        assert before < lsn <= after, f"{what}: commit {k}: {fmt_lsn(lsn)} not in ({fmt_lsn(before)}, {fmt_lsn(after)}]"
        committed = time_of_lsn(http, tenant, timeline, lsn)
        row_time = pg_time(pg, "at", f"FROM marks WHERE id = {k}")
        assert row_time <= committed <= between, f"{what}: commit {k} at {committed}"
        lsns.append(lsn)
    return lsns


def rows_at(ps, tenant, timeline, lsn: int, major: int, out, port: int) -> list[int]:
    tar = fetch_backup(ps, "fullbackup", tenant, timeline, out / f"full_{lsn:X}.tar", fmt_lsn(lsn))
    restored = restore(tar, out / f"restored_{lsn:X}", port, major)
    restored.start()
    try:
        return [int(x) for x in restored.psql("SELECT id FROM marks ORDER BY id").split()]
    finally:
        restored.stop(mode="immediate")
        restored.remove()


def test_lsn_by_timestamp_exact_to_the_commit(pageserver_factory, primary, test_output_dir, port_distributor):
    ps = pageserver_factory.create(overrides=MANUAL)
    ps.start()
    pg = primary
    http, tenant, timeline = follow_primary(ps, pg, PRIMARY_GONE)
    start = datetime.now(timezone.utc)
    points = commit_at_known_times(pg)
    # Up to the abort after the last commit: until a later transaction is
    # ingested, a time after the last commit is "future", not "present".
    wait_for_lsn(http, tenant, timeline, parse_lsn(pg.psql("SELECT pg_current_wal_insert_lsn()")))
    lsns = check_answers(http, tenant, timeline, pg, points, "streaming")
    # The real PostgreSQL at two of them sees exactly the rows committed by then.
    for k in (2, COMMITS):
        got = rows_at(ps, tenant, timeline, lsns[k - 1], pg.major, test_output_dir, port_distributor.get())
        assert got == list(range(1, k + 1)), f"PostgreSQL {pg.major} at commit {k}: rows {got}"

    info = http.timeline_get(tenant, timeline)
    floor = parse_lsn(info["wal_source"]["consistent_lsn"])
    assert lsn_by_time(http, tenant, timeline, start - timedelta(days=365)) == ("past", floor)
    assert lsn_by_time(http, tenant, timeline, "2000-01-01T00:00:00+00:00") == ("past", floor)
    kind, lsn = lsn_by_time(http, tenant, timeline, datetime.now(timezone.utc) + timedelta(hours=1))
    assert kind == "future" and lsns[-1] <= lsn <= parse_lsn(info["last_record_lsn"]), (kind, fmt_lsn(lsn))
    with pytest.raises(PageserverApiError) as e:
        time_of_lsn(http, tenant, timeline, parse_lsn(info["last_record_lsn"]) + 0x1000000)
    assert e.value.status == 400 and "above the last record LSN" in str(e.value)
    with pytest.raises(PageserverApiError) as e:
        lsn_by_time(http, tenant, timeline, "yesterday")
    assert e.value.status == 400 and "is not RFC 3339" in str(e.value)

    # An empty timeline: no data, and no timestamp for any LSN.
    empty = http.timeline_create(tenant, pg_version=pg.major)
    kind, lsn = lsn_by_time(http, tenant, empty["timeline_id"], start)
    assert kind == "nodata" and lsn == parse_lsn(empty["initial_lsn"]), (kind, fmt_lsn(lsn))
    with pytest.raises(PageserverApiError) as e:
        time_of_lsn(http, tenant, empty["timeline_id"], parse_lsn(empty["initial_lsn"]))
    assert e.value.status == 404 and "no transaction ended at or before" in str(e.value)

    # Durable: the same answers after a checkpoint and a restart, and after
    # compaction and GC for the commits at or above the GC cutoff.
    http.timeline_checkpoint(tenant, timeline)
    ps.restart()
    wait_for_lsn(http, tenant, timeline, points[-1][2])
    assert check_answers(http, tenant, timeline, pg, points, "after a restart") == lsns
    http.timeline_compact(tenant, timeline, force_l0=True, force_images=True)
    last = parse_lsn(http.timeline_get(tenant, timeline)["last_record_lsn"])
    cutoff = parse_lsn(http.timeline_gc(tenant, timeline, gc_horizon=last - points[3][1])["gc_cutoff"])
    assert lsns[2] < cutoff < lsns[-1], (fmt_lsn(cutoff), [fmt_lsn(x) for x in lsns])
    for k, (between, _, _) in enumerate(points, start=1):
        kind, lsn = lsn_by_time(http, tenant, timeline, between)
        if lsns[k - 1] >= cutoff:
            assert (kind, lsn) == ("present", lsns[k - 1]), f"after GC, commit {k}"
        elif lsns[k] <= cutoff:
            assert (kind, lsn) == ("past", cutoff), f"after GC, commit {k}: the next one is below the cutoff"
        else:
            # `present` at the cutoff only if no transaction (the rolled-back
            # one after commit k) ended between commit k and the cutoff.
            assert kind in ("past", "present") and lsn == cutoff, f"after GC, commit {k}: {kind}"
    got = rows_at(ps, tenant, timeline, lsns[4], pg.major, test_output_dir, port_distributor.get())
    assert got == [1, 2, 3, 4, 5], f"PostgreSQL {pg.major} at commit 5 after GC: rows {got}"
