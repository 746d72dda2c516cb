"""A source with several hosts (issue 30 item 3): a primary and its
streaming standby, both listed (`host=h,h port=p,s`), one server pair and
one daemon for all of the steps, per major:

- the bootstrap creates the slot on both hosts; the daemon streams from the
  standby (`prefer-standby`, the default) and the slot keeper advances the
  primary's slot to the durable position;
- (b) the standby is stopped (immediate): the daemon switches to the
  primary and goes on; the standby, started again, has its slot advanced;
- (d) `PUT .../source` without the primary drops the slot there; with it
  again, the slot is created there again; deleting another timeline that
  follows both hosts drops its slot on both;
- (a) + (c) under synchronous replication and load, the primary is stopped
  (immediate), the daemon is killed (-9), the standby is promoted and the
  daemon started: it goes on on the new primary, timeline 2, with every
  row the clients had acknowledged, and its pages equal the new primary's
  files after a clean stop; `PUT .../source` dropping the dead host names
  the slot left there and the SQL that drops it.
"""

from __future__ import annotations

import subprocess
import threading
import time

import pytest

from fixtures.pagestream import parse_lsn
from fixtures.vanilla_pg import VanillaPostgres, primary_with_standby
from fixtures.wal_compare import compare_slru_with_primary, compare_with_primary

SETTINGS = {
    "wal_consistency_checking": "'hash,gin,gist,spgist,brin'",
    "max_replication_slots": "4",
    "max_wal_senders": "6",
    "hot_standby_feedback": "off",
}
OVERRIDES = {
    "wal_receiver_slot_advance_interval": "200 ms",
    "wal_receiver_idle_flush": "200 ms",
    "wal_receiver_status_interval": "500 ms",
    "wal_receiver_timeout": "5 s",
}
# A host stops or goes away while the daemon follows it; a slot on the dead
# host cannot be dropped.
ALLOWED = [
    r"replication failed: .*(Connection refused|connection closed|closed the connection|Broken pipe|Connection reset|shutting down|starting up|terminating|57P0[1-3]|no host to stream from)",
    r"replication slot pageserver_\w+ on 127\.0\.0\.1:\d+ is left",
]


@pytest.fixture(params=[15, 18], ids=lambda v: f"pg{v}")
def pair(request, test_output_dir, port_distributor):
    with primary_with_standby(test_output_dir, port_distributor, request.param, SETTINGS) as servers:
        yield servers


def lsn_of(pg: VanillaPostgres) -> int:
    return parse_lsn(pg.psql("SELECT pg_current_wal_insert_lsn()"))


def restart_lsn(pg: VanillaPostgres, slot: str) -> int | None:
    out = pg.psql(f"SELECT restart_lsn FROM pg_replication_slots WHERE slot_name = '{slot}'")
    return parse_lsn(out) if out else None


def wait_until(what: str, check, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"waiting for {what}"
        time.sleep(0.05)


def host_of(pg: VanillaPostgres) -> str:
    return f"127.0.0.1:{pg.port}"


def two_hosts(primary: VanillaPostgres, standby: VanillaPostgres) -> str:
    return f"host=127.0.0.1,127.0.0.1 port={primary.port},{standby.port} user=postgres dbname=postgres"


class AckedWriter(threading.Thread):
    """Inserts rows one by one (autocommit) until the server fails; keeps the
    ids and commit LSNs the server acknowledged."""

    def __init__(self, pg: VanillaPostgres):
        super().__init__(daemon=True)
        self.pg = pg
        self.acked: list[int] = []
        self.acked_lsn = 0

    def run(self) -> None:
        n = 0
        while True:
            n += 1
            sql = f"INSERT INTO acked VALUES ({n}); SELECT pg_current_wal_insert_lsn()"
            cmd = self.pg._cmd("psql", "-h", "127.0.0.1", "-p", str(self.pg.port), "-U", "postgres", "-At", "-v", "ON_ERROR_STOP=1", "-c", sql)
            res = subprocess.run(cmd, capture_output=True, text=True, cwd="/")
            if res.returncode != 0:
                return
            self.acked.append(n)
            self.acked_lsn = parse_lsn(res.stdout.strip().splitlines()[-1])


def test_multihost_source_follows_failover(pageserver_factory, pair):
    primary, standby = pair
    ps = pageserver_factory.create(overrides=OVERRIDES).start()
    ps.allow_errors(*ALLOWED)
    http = ps.http_client()
    primary.pgbench_init(1)
    primary.psql("CREATE TABLE acked (id int)")
    standby.wait_replayed(lsn_of(primary))
    tenant = http.tenant_create()
    info = http._json("POST", f"/v1/tenant/{tenant}/timeline", json={"source": {"connstring": two_hosts(primary, standby)}})
    timeline = info["timeline_id"]
    slot = f"pageserver_{timeline}"
    get = lambda: http.timeline_get(tenant, timeline)  # noqa: E731
    hosts = {h["host"]: h for h in info["wal_source"]["hosts"]}
    assert set(hosts) == {host_of(primary), host_of(standby)}, info
    assert all(h["slot_present"] for h in hosts.values()), info
    start_p, start_s = restart_lsn(primary, slot), restart_lsn(standby, slot)
    assert start_p is not None and start_s is not None, "the slot is on both hosts"
    assert max(start_p, start_s) <= parse_lsn(info["wal_source"]["consistent_lsn"]), info

    # The standby is streamed from; the primary's slot follows the durable position.
    wait_until("streaming from the standby", lambda: get()["wal_source"]["host"] == host_of(standby) and get()["wal_source"]["state"] == "streaming")
    primary.psql("CREATE TABLE t1 AS SELECT g FROM generate_series(1, 10000) g")
    target = lsn_of(primary)
    wait_until("the primary's slot advanced", lambda: (restart_lsn(primary, slot) or 0) >= target)
    p_info = {h["host"]: h for h in get()["wal_source"]["hosts"]}[host_of(primary)]
    assert p_info["role"] == "primary" and parse_lsn(p_info["advanced_lsn"]) >= target, p_info
    assert http.metrics().value("pageserver_wal_source_slot_advances_total") >= 1

    # (b) The standby goes away: the daemon streams from the primary.
    standby.stop(mode="immediate")
    primary.psql("CREATE TABLE t2 AS SELECT g FROM generate_series(1, 10000) g")
    target = lsn_of(primary)
    wait_until("streaming from the primary", lambda: get()["wal_source"]["host"] == host_of(primary) and parse_lsn(get()["last_record_lsn"]) >= target)
    assert ps.log_contains(rf"streaming from host {host_of(primary)} of 2")
    standby.start()
    primary.psql("CREATE TABLE t3 AS SELECT g FROM generate_series(1, 10000) g")
    target = lsn_of(primary)
    wait_until("the standby's slot advanced", lambda: (restart_lsn(standby, slot) or 0) >= target)
    s_info = {h["host"]: h for h in get()["wal_source"]["hosts"]}[host_of(standby)]
    assert s_info["role"] == "standby" and s_info["slot_present"], s_info

    # (d) PUT without the primary drops the slot there; with it, creates it again.
    only_standby = f"host=127.0.0.1 port={standby.port} user=postgres dbname=postgres"
    body = {"connstring": only_standby, "slot": slot}
    answer = http._json("PUT", f"/v1/tenant/{tenant}/timeline/{timeline}/source", json=body)
    assert answer["slots_left"] == [] and restart_lsn(primary, slot) is None, answer
    body = {"connstring": two_hosts(primary, standby), "slot": slot}
    answer = http._json("PUT", f"/v1/tenant/{tenant}/timeline/{timeline}/source", json=body)
    assert answer["slots_left"] == [] and restart_lsn(primary, slot) is not None, answer
    wait_until("streaming from the standby again", lambda: get()["wal_source"]["host"] == host_of(standby) and get()["wal_source"]["state"] == "streaming")

    # Deleting a timeline drops its slot on every host.
    other = http._json("POST", f"/v1/tenant/{http.tenant_create()}/timeline", json={"source": {"connstring": two_hosts(primary, standby)}})
    other_slot = f"pageserver_{other['timeline_id']}"
    assert restart_lsn(primary, other_slot) is not None and restart_lsn(standby, other_slot) is not None
    answer = http._json("DELETE", f"/v1/tenant/{other['tenant_id']}/timeline/{other['timeline_id']}")
    assert answer == {"slot_dropped": other_slot}, answer
    assert restart_lsn(primary, other_slot) is None and restart_lsn(standby, other_slot) is None

    # (a) + (c): synchronous replication, load, the primary dies, the daemon is killed.
    primary.set_conf({"synchronous_standby_names": "'walreceiver'"})
    primary.reload()
    wait_until("a synchronous standby", lambda: primary.psql("SELECT sync_state FROM pg_stat_replication WHERE application_name = 'walreceiver'") == "sync")
    writer = AckedWriter(primary)
    writer.start()
    bench = subprocess.Popen(
        primary._cmd("pgbench", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres", "-c", "2", "-T", "30", "postgres"),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/",
    )  # fmt: skip
    wait_until("acknowledged rows", lambda: len(writer.acked) >= 20)
    primary.stop(mode="immediate")
    writer.join(timeout=30)
    bench.wait(timeout=30)
    ps.kill()
    standby.promote()
    ps.start()
    bench = subprocess.Popen(
        standby._cmd("pgbench", "-h", "127.0.0.1", "-p", str(standby.port), "-U", "postgres", "-c", "2", "-T", "2", "postgres"),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/",
    )  # fmt: skip
    bench.wait(timeout=30)
    acked = writer.acked
    assert int(standby.psql(f"SELECT count(*) FROM acked WHERE id <= {acked[-1]}")) >= len(acked)
    target = lsn_of(standby)
    info = wait_until("the daemon on the new primary", lambda: (i := get())["wal_source"]["pg_tli"] == 2 and parse_lsn(i["last_record_lsn"]) >= target and i)
    assert info["wal_source"]["host"] == host_of(standby), info
    assert parse_lsn(info["last_record_lsn"]) >= writer.acked_lsn, f"acknowledged {writer.acked_lsn:X}: {info}"
    p_info = wait_until("the keeper's error on the dead host", lambda: (h := {h["host"]: h for h in get()["wal_source"]["hosts"]}[host_of(primary)])["last_error"] and h)
    assert p_info["errors"] >= 1 and "connect" in p_info["last_error"], p_info
    assert http.metrics().value("pageserver_wal_source_host_errors_total", op="connect") >= 1

    standby.stop()  # clean: the shutdown checkpoint is flushed
    standby.start()
    standby.psql("CHECKPOINT")
    lsn = lsn_of(standby)
    wait_until("caught up after the clean stop", lambda: parse_lsn(get()["last_record_lsn"]) >= lsn, timeout=60)
    res = compare_with_primary(ps, tenant, timeline, standby, lsn)
    compare_slru_with_primary(ps, tenant, timeline, standby, lsn, res)
    assert res.pages > 100 and not res.mismatches, f"{len(res.mismatches)} mismatches of {res.pages} pages:\n" + "\n".join(res.mismatches[:40])
    assert int(standby.psql("SELECT count(*) FROM acked")) >= len(acked)

    # The dead host leaves the list: its slot cannot be dropped, the answer says how.
    left_before = http.metrics().value("pageserver_replication_slots_left_total", cause="source_replaced")
    body = {"connstring": only_standby, "slot": slot}
    answer = http._json("PUT", f"/v1/tenant/{tenant}/timeline/{timeline}/source", json=body)
    assert len(answer["slots_left"]) == 1, answer
    msg = answer["slots_left"][0]
    assert host_of(primary) in msg and f"SELECT pg_drop_replication_slot('{slot}')" in msg, msg
    assert http.metrics().value("pageserver_replication_slots_left_total", cause="source_replaced") == left_before + 1
