"""Following a PostgreSQL cluster through failover (issue 30).

- A timeline that follows a physical standby (cascading: slot, base backup
  and stream on the standby) follows it through its promotion in the middle
  of a pgbench run: the stream goes on with PostgreSQL timeline 2 at the
  switch LSN, a kill -9 after the switch resumes there, and the pages equal
  the new primary's own files after it stops cleanly.
- A timeline that followed the old primary past the point where the standby
  was promoted (the standby had stopped receiving) meets the new primary at
  the same address: the daemon detects the divergence, names both LSNs and
  both timelines, stops ingest, and still serves what it ingested, never
  the new primary's WAL on top of it. With `on_divergence = branch` it
  also creates, once across crashes, a branch at the switch LSN that
  follows the new primary.
"""

from __future__ import annotations

import hashlib
import subprocess
import time

import pytest

from fixtures.pagestream import ExistsResponse, NblocksResponse, RelTag, parse_lsn
from fixtures.vanilla_pg import VanillaPostgres, primary_with_standby
from fixtures.wal_compare import compare_slru_with_primary, compare_with_primary

SETTINGS = {
    "wal_consistency_checking": "'hash,gin,gist,spgist,brin'",
    "max_replication_slots": "4",
    "hot_standby_feedback": "off",
}
# The old primary stops or goes away while the daemon follows it or the standby.
SERVER_GONE = [
    r"replication failed: .*(Connection refused|connection closed|closed the connection|shutting down|starting up|terminating|57P0[1-3])",
]


@pytest.fixture(params=[15, 18], ids=lambda v: f"pg{v}")
def cluster(request, test_output_dir, port_distributor):
    """A primary and a physical standby of it, both running."""
    with primary_with_standby(test_output_dir, port_distributor, request.param, SETTINGS) as servers:
        yield servers


def connstring(pg: VanillaPostgres) -> str:
    return f"postgres://postgres@127.0.0.1:{pg.port}/postgres"


def current_lsn(pg: VanillaPostgres) -> int:
    return parse_lsn(pg.psql("SELECT pg_current_wal_insert_lsn()"))


def wait_for(http, tenant: str, timeline: str, done, what: str, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        info = http.timeline_get(tenant, timeline)
        if done(info):
            return info
        assert time.monotonic() < deadline, f"waiting for {what}: {info}"
        time.sleep(0.05)


def caught_up(lsn: int):
    return lambda info: parse_lsn(info["last_record_lsn"]) >= lsn


def pgbench(pg: VanillaPostgres, seconds: int) -> subprocess.Popen:
    return subprocess.Popen(
        pg._cmd("pgbench", "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres", "-c", "2", "-T", str(seconds), "postgres"),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/",
    )  # fmt: skip


def history_switch(pg: VanillaPostgres, tli: int) -> int:
    """The switch LSN of the newest ancestor in the history file of `tli`."""
    line = pg.psql(f"SELECT content FROM pg_read_file('pg_wal/{tli:08X}.history') AS content")
    fields = [ln.split("\t") for ln in line.splitlines() if ln and not ln.startswith("#")]
    return parse_lsn(fields[-1][1])


def assert_matches(ps, tenant: str, timeline: str, pg: VanillaPostgres, what: str) -> None:
    pg.psql("CHECKPOINT")
    lsn = current_lsn(pg)
    wait_for(ps.http_client(), tenant, timeline, caught_up(lsn), f"{lsn:X}")
    res = compare_with_primary(ps, tenant, timeline, pg, lsn)
    compare_slru_with_primary(ps, tenant, timeline, pg, lsn, res)
    assert res.pages > 100 and res.slru_segments >= 1, res
    assert not res.mismatches, f"{what}: {len(res.mismatches)} mismatches of {res.pages} pages:\n" + "\n".join(res.mismatches[:40])


def test_follow_standby_through_promotion(pageserver, cluster):
    """(a) and (c): the standby is the source; it is promoted while pgbench
    writes on the primary, then pgbench writes on it; the daemon is killed
    (-9) after the switch. Ingest follows timeline 2 from the switch LSN
    without a reconnect, resumes on it after the kill, and the pages equal
    the new primary's files after a clean stop."""
    primary, standby = cluster
    ps = pageserver
    ps.allow_errors(*SERVER_GONE)
    primary.pgbench_init(1)
    standby.wait_replayed(current_lsn(primary))
    http = ps.http_client()
    tenant = http.tenant_create()
    info = http._json("POST", f"/v1/tenant/{tenant}/timeline", json={"source": {"connstring": connstring(standby)}})
    timeline = info["timeline_id"]
    assert info["wal_source"]["pg_tli"] == 1 and info["wal_source"]["pg_tli_history"] == [], info
    assert f"pageserver_{timeline}" in standby.psql("SELECT slot_name FROM pg_replication_slots")
    ids = {"tenant_id": tenant, "timeline_id": timeline}

    bench = pgbench(primary, 4)
    time.sleep(1.5)
    reconnects = http.metrics().value("pageserver_wal_receiver_reconnects_total")
    standby.promote()  # in the middle of the run: the rest stays on the old primary
    switch = history_switch(standby, 2)
    bench.wait(timeout=30)
    bench = pgbench(standby, 3)
    info = wait_for(http, tenant, timeline, lambda i: i["wal_source"]["pg_tli"] == 2, "timeline 2")
    src = info["wal_source"]
    assert src["pg_tli_history"] == [{"tli": 1, "switch_lsn": f"{switch >> 32:X}/{switch & 0xFFFFFFFF:X}"}], src
    assert src["state"] == "streaming" and src["last_error"] is None, src
    assert http.metrics().value("pageserver_wal_source_pg_tli", **ids) == 2
    wait_for(http, tenant, timeline, caught_up(switch + 1), "WAL of timeline 2")
    assert ps.log_contains(r"PostgreSQL timeline 1 ended at .*; going on with timeline 2")
    assert http.metrics().value("pageserver_wal_receiver_reconnects_total") == reconnects, "the switch reconnected"

    time.sleep(1)  # (c) kill -9 while pgbench writes on the new primary
    ps.kill()
    ps.start()
    bench.wait(timeout=30)
    info = wait_for(http, tenant, timeline, caught_up(current_lsn(standby)), "catch-up after kill -9")
    assert info["wal_source"]["pg_tli"] == 2, info

    standby.stop()  # clean: the shutdown checkpoint is flushed
    standby.start()
    assert_matches(ps, tenant, timeline, standby, "after the promotion, a kill -9 and a clean stop")
    info = http.timeline_get(tenant, timeline)
    assert info["wal_source"]["pg_tli"] == 2 and info["wal_source"]["state"] == "streaming", info


def relation(pg: VanillaPostgres, table: str) -> RelTag:
    db = int(pg.psql("SELECT oid FROM pg_database WHERE datname = current_database()"))
    return RelTag(0x67F, db, int(pg.psql(f"SELECT pg_relation_filenode('{table}')")), 0)


def make_divergence(ps, primary: VanillaPostgres, standby: VanillaPostgres, source: dict):
    """The standby stops receiving, the old primary writes on (the daemon
    follows it with `source`) and dies, the standby is promoted, writes
    `new_only` and takes over the old primary's address, with a slot for
    the daemon. Returns (tenant, timeline, slot, switch LSN, old_only,
    new_only)."""
    ps.allow_errors(*SERVER_GONE, r"the server's PostgreSQL timeline history diverged")
    primary.psql("CREATE TABLE common AS SELECT g FROM generate_series(1, 1000) g")
    http = ps.http_client()
    tenant = http.tenant_create()
    source = {"connstring": connstring(primary), **source}
    info = http._json("POST", f"/v1/tenant/{tenant}/timeline", json={"source": source})
    timeline = info["timeline_id"]
    slot = f"pageserver_{timeline}"
    standby.wait_replayed(current_lsn(primary))

    standby.set_conf({"primary_conninfo": "''"})
    standby.reload()
    deadline = time.monotonic() + 30
    while standby.psql("SELECT count(*) FROM pg_stat_wal_receiver") != "0":
        assert time.monotonic() < deadline, "the standby's WAL receiver did not stop"
        time.sleep(0.05)
    primary.psql("CREATE TABLE old_only AS SELECT g FROM generate_series(1, 1000) g")
    old_only = relation(primary, "old_only")
    wait_for(http, tenant, timeline, caught_up(current_lsn(primary)), "the old primary's last WAL")
    primary.stop(mode="immediate")  # the old primary dies

    standby.promote()
    switch = history_switch(standby, 2)
    standby.psql("CREATE TABLE new_only AS SELECT g FROM generate_series(1, 1000) g")
    new_only = relation(standby, "new_only")
    standby.psql(f"SELECT pg_create_physical_replication_slot('{slot}', true)")
    standby.stop()
    standby.set_conf({"port": str(primary.port)})  # the new primary takes the old one's address
    standby.port = primary.port
    standby.start()
    return tenant, timeline, slot, switch, old_only, new_only


def fmt(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def test_divergence_is_detected_never_mixed(pageserver, cluster):
    """(b): the old primary's WAL past the standby's promotion was ingested
    (`make_divergence`). The daemon detects that its WAL past the switch
    LSN belongs to a history that no longer exists: state `diverged`, both
    LSNs and timelines named, one ERROR line, a metric; it still serves
    what it ingested, and nothing of the new primary. Today's code ingests
    the new primary's WAL on top instead."""
    primary, standby = cluster
    ps = pageserver
    http = ps.http_client()
    tenant, timeline, slot, switch, old_only, new_only = make_divergence(ps, primary, standby, {})
    ids = {"tenant_id": tenant, "timeline_id": timeline}
    info = wait_for(http, tenant, timeline, lambda i: i["wal_source"]["state"] == "diverged", "divergence", timeout=45)
    ingested = parse_lsn(info["last_record_lsn"])
    assert switch < ingested, f"the daemon ingested past the switch {switch:X}: {info}"
    err = info["wal_source"]["last_error"]
    for needle in [f"diverged from the ingested WAL at {fmt(switch)}", "timeline 2's WAL", f"ingested timeline 1's up to {fmt(ingested)}"]:
        assert needle in err, err
    assert info["wal_source"]["pg_tli"] == 1, info
    assert http.metrics().value("pageserver_wal_source_diverged", **ids) == 1
    errors = [ln for ln in ps.log_lines() if "ERROR" in ln and "diverged from the ingested WAL" in ln]
    assert len(errors) == 1, errors

    # Still serving the last ingested state: the old primary's table, not the new one's.
    with ps.pagestream(tenant, timeline) as c:
        resp = c.nblocks(old_only, lsn=ingested)
        assert isinstance(resp, NblocksResponse) and resp.n_blocks > 0, resp
        resp = c.exists(new_only, lsn=ingested)
        assert not (isinstance(resp, ExistsResponse) and resp.exists), resp
    time.sleep(0.5)
    assert parse_lsn(http.timeline_get(tenant, timeline)["last_record_lsn"]) == ingested

    # Pointing the source at the new primary explicitly says the same.
    body = {"connstring": connstring(standby), "slot": slot}
    info = http._json("PUT", f"/v1/tenant/{tenant}/timeline/{timeline}/source", json=body)
    info = wait_for(http, tenant, timeline, lambda i: i["wal_source"]["state"] == "diverged", "divergence again", timeout=30)
    assert fmt(switch) in info["wal_source"]["last_error"] and parse_lsn(info["last_record_lsn"]) == ingested, info


def expected_branch_id(timeline: str, switch: int, new_tli: int) -> str:
    """`walreceiver::fork::branch_id`: deterministic, so a restart finds the branch."""
    data = b"pageserver on_divergence branch v1\0" + bytes.fromhex(timeline) + switch.to_bytes(8, "big") + new_tli.to_bytes(4, "big")
    return hashlib.sha256(data).hexdigest()[:32]


@pytest.mark.failpoints
@pytest.mark.parametrize("cluster", [15], indirect=True, ids=["pg15"])
def test_divergence_branches_and_follows(pageserver_factory, testing_pageserver_bin, cluster):
    """(b) with `on_divergence = branch`: the daemon creates by itself a
    branch of the diverged timeline at the switch LSN that follows the new
    primary (its own new slot there); the old timeline stays `diverged`,
    names the branch and serves the old primary's table. A crash (`exit`)
    right after the branch is created, before its slot and source, and a
    later kill -9, each followed by a restart, find the branch and make no
    second one; after a clean stop of the new primary the branch's pages
    equal its files."""
    primary, standby = cluster
    ps = pageserver_factory.create(binary=testing_pageserver_bin).start()
    http = ps.http_client()
    http.configure_failpoints({"divergence-branch::after-create": "exit"})
    source = {"on_divergence": "branch"}
    tenant, timeline, _, switch, old_only, new_only = make_divergence(ps, primary, standby, source)
    branch = expected_branch_id(timeline, switch, 2)
    deadline = time.monotonic() + 45
    while ps.is_running():  # the crash right after the branch's creation
        assert time.monotonic() < deadline, "the daemon did not reach the failpoint"
        time.sleep(0.05)
    ps.stop()  # reap the exited daemon
    assert f"pageserver_{branch}" not in standby.psql("SELECT slot_name FROM pg_replication_slots")
    ps.start()
    named = lambda i: f"continued in timeline {branch}" in (i["wal_source"]["last_error"] or "")  # noqa: E731
    info = wait_for(http, tenant, timeline, named, "the branch", timeout=45)
    assert info["wal_source"]["state"] == "diverged", info
    assert f"a branch of this one at {fmt(switch)} that follows PostgreSQL timeline 2" in info["wal_source"]["last_error"], info
    ingested = parse_lsn(info["last_record_lsn"])
    assert switch < ingested, info

    b = http.timeline_get(tenant, branch)
    assert b["ancestor_timeline_id"] == timeline and b["ancestor_lsn"] == fmt(switch), b
    assert b["wal_source"]["slot"] == f"pageserver_{branch}" and b["wal_source"]["on_divergence"] == "branch", b
    assert f"pageserver_{branch}" in standby.psql("SELECT slot_name FROM pg_replication_slots")
    wait_for(http, tenant, branch, caught_up(current_lsn(standby)), "the branch following the new primary")

    def check_old():
        with ps.pagestream(tenant, timeline) as c:
            resp = c.nblocks(old_only, lsn=ingested)
            assert isinstance(resp, NblocksResponse) and resp.n_blocks > 0, resp
            resp = c.exists(new_only, lsn=ingested)
            assert not (isinstance(resp, ExistsResponse) and resp.exists), resp
        assert parse_lsn(http.timeline_get(tenant, timeline)["last_record_lsn"]) == ingested

    check_old()
    ps.kill()  # kill -9, then the old timeline diverges again and finds its branch
    ps.start()
    info = wait_for(http, tenant, timeline, named, "the branch after kill -9", timeout=45)
    timelines = sorted(t["timeline_id"] for t in http._json("GET", f"/v1/tenant/{tenant}/timeline"))
    assert timelines == sorted([timeline, branch]), timelines
    check_old()

    standby.psql("CREATE TABLE after_branch AS SELECT g FROM generate_series(1, 1000) g")
    standby.stop()  # clean: the shutdown checkpoint is flushed
    standby.start()
    assert_matches(ps, tenant, branch, standby, "the branch after the divergence, a kill -9 and a clean stop")
    with ps.pagestream(tenant, branch) as c:
        resp = c.exists(new_only, lsn=current_lsn(standby))
        assert isinstance(resp, ExistsResponse) and resp.exists, resp
