"""Follow a live PostgreSQL: the daemon bootstraps a timeline from the
primary (slot, BASE_BACKUP, import), streams WAL, and serves at each
checkpointed LSN exactly the pages of the primary's own files (masked as
PostgreSQL's consistency checking masks them)."""

from __future__ import annotations

import subprocess
import threading
import time

import pytest

from fixtures.pagestream import parse_lsn
from fixtures.vanilla_pg import VanillaPostgres, pg_bin_dir
from fixtures.wal_compare import compare_slru_with_primary, compare_with_primary, follow_primary

PRIMARY_SETTINGS = {
    "wal_consistency_checking": "'all'",
    "max_replication_slots": "4",
    "max_prepared_transactions": "4",
}
# The builds of 16-18 used here have neither zstd nor lz4.
WAL_COMPRESSION = {15: "zstd", 16: "pglz", 17: "pglz", 18: "pglz"}


@pytest.fixture(params=[15, 16, 17, 18], ids=lambda v: f"pg{v}")
def primary(request, test_output_dir, port_distributor):
    major = request.param
    bin_dir = pg_bin_dir(major)
    if bin_dir is None:
        pytest.fail(f"PostgreSQL {major} is not installed: run scripts/install-test-deps.sh")
    pg = VanillaPostgres(test_output_dir / f"pg{major}", port_distributor.get(), bin_dir=bin_dir)
    pg.major = major
    pg.init({**PRIMARY_SETTINGS, "wal_compression": WAL_COMPRESSION[major]}).start()
    yield pg
    pg.stop(mode="immediate")
    pg.release()


def connstring(pg) -> str:
    return f"postgres://postgres@127.0.0.1:{pg.port}/postgres"


def wait_for_lsn(http, tenant: str, timeline: str, lsn: int, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        info = http.timeline_get(tenant, timeline)
        if parse_lsn(info["last_record_lsn"]) >= lsn:
            return info
        assert time.monotonic() < deadline, f"ingest stuck at {info['last_record_lsn']}, waiting for {lsn:X}"
        time.sleep(0.05)


# Every index type, sequences, a prepared transaction, subtransactions, an
# unlogged table, VM bits set and cleared, multixacts (shared row locks).
WORKLOAD = [
    "CREATE TABLE t (id int PRIMARY KEY, v text, a int[], r int4range, p point)",
    "INSERT INTO t SELECT g, md5(g::text), ARRAY[g, g % 10], int4range(g, g + 10), point(g, g % 100) "
    "FROM generate_series(1, 5000) g",
    "CREATE INDEX t_hash ON t USING hash (v)",
    "CREATE INDEX t_gin ON t USING gin (a)",
    "CREATE INDEX t_gist ON t USING gist (r)",
    "CREATE INDEX t_spgist ON t USING spgist (p)",
    "CREATE INDEX t_brin ON t USING brin (id)",
    "UPDATE t SET v = v || 'x' WHERE id % 3 = 0",
    "DELETE FROM t WHERE id % 7 = 0",
    "VACUUM (FREEZE) t",
    "UPDATE t SET v = 'after vacuum' WHERE id % 11 = 0",
    "CREATE SEQUENCE s; SELECT nextval('s') FROM generate_series(1, 100)",
    "BEGIN; INSERT INTO t VALUES (100001, 'sub'); SAVEPOINT a; INSERT INTO t VALUES (100002, 'rolled back'); "
    "ROLLBACK TO a; SAVEPOINT b; INSERT INTO t VALUES (100003, 'kept'); RELEASE b; COMMIT",
    "BEGIN; INSERT INTO t VALUES (100004, 'prepared'); PREPARE TRANSACTION 'p1'",
    "COMMIT PREPARED 'p1'",
    "BEGIN; INSERT INTO t VALUES (100005, 'prepared, then rolled back'); PREPARE TRANSACTION 'p2'",
    "ROLLBACK PREPARED 'p2'",
    "CREATE UNLOGGED TABLE ul (x int); INSERT INTO ul SELECT generate_series(1, 1000)",
    "BEGIN; SELECT * FROM t WHERE id < 10 FOR SHARE; COMMIT",
]


def share_lock_together(pg) -> None:
    """Two transactions share-lock the same rows at once: a multixact."""
    sql = "BEGIN; SELECT count(*) FROM (SELECT * FROM t WHERE id < 50 FOR SHARE) s; SELECT pg_sleep(0.5); COMMIT"
    threads = [threading.Thread(target=pg.psql, args=(sql,)) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert int(pg.psql("SELECT count(*) FROM t WHERE id < 50 AND (xmax::text::bigint) > 0")) > 0


def checkpoint_lsn(pg) -> int:
    pg.psql("CHECKPOINT")
    return parse_lsn(pg.psql("SELECT pg_current_wal_insert_lsn()"))


def assert_matches(ps, tenant, timeline, pg, what: str) -> None:
    lsn = checkpoint_lsn(pg)
    wait_for_lsn(ps.http_client(), tenant, timeline, lsn)
    res = compare_with_primary(ps, tenant, timeline, pg, lsn)
    compare_slru_with_primary(ps, tenant, timeline, pg, lsn, res)
    assert res.pages > 100 and res.slru_segments >= 3 and res.databases >= 2, res
    assert not res.mismatches, f"{what}: {len(res.mismatches)} mismatches of {res.pages} pages:\n" + "\n".join(res.mismatches[:40])


# The primary stops (restart, teardown) while the daemon follows it.
PRIMARY_GONE = [r"replication failed: .*(Connection refused|connection closed|closed the connection|shutting down|starting up|terminating|57P0[1-3])"]


def test_follow_primary_pages_match(pageserver, primary):
    ps, pg = pageserver, primary
    ps.allow_errors(*PRIMARY_GONE)
    http = ps.http_client()
    tenant = http.tenant_create()
    info = http._json(
        "POST", f"/v1/tenant/{tenant}/timeline", json={"source": {"connstring": connstring(pg)}}
    )
    timeline = info["timeline_id"]
    assert info["wal_source"]["slot"] == f"pageserver_{timeline}"
    assert "password" not in info["wal_source"]["connstring"]
    slots = pg.psql("SELECT slot_name FROM pg_replication_slots")
    assert f"pageserver_{timeline}" in slots

    pg.pgbench_init(1)
    pg.run("pgbench", "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres", "-c", "2", "-T", "3", "postgres")
    for sql in WORKLOAD:
        pg.psql(sql)
    share_lock_together(pg)
    assert_matches(ps, tenant, timeline, pg, "after pgbench -i and DDL")
    src = http.timeline_get(tenant, timeline)["wal_source"]
    assert src["state"] == "streaming" and src["last_error"] is None, src
    assert parse_lsn(src["received_lsn"]) >= parse_lsn(src["consistent_lsn"]), src
    m = http.metrics()
    ids = {"tenant_id": tenant, "timeline_id": timeline}
    assert m.value("pageserver_wal_receiver_lag_bytes", **ids) >= 0
    assert m.value("pageserver_wal_receiver_lag_seconds", **ids) >= 0
    flushed = m.value("pageserver_wal_receiver_positions", position="flush", **ids)
    assert 0 < flushed <= m.value("pageserver_wal_receiver_positions", position="write", **ids)

    pg.psql("TRUNCATE pgbench_history; BEGIN; CREATE TABLE gone (x int); INSERT INTO gone VALUES (1); ROLLBACK")
    pg.psql("CREATE DATABASE copied STRATEGY FILE_COPY")
    pg.psql("CREATE DATABASE logged STRATEGY WAL_LOG")
    pg.psql("CREATE TABLE u AS SELECT g FROM generate_series(1, 1000) g", dbname="copied")
    pg.psql("VACUUM FULL t")
    assert_matches(ps, tenant, timeline, pg, "after TRUNCATE, CREATE DATABASE, VACUUM FULL")

    pg.psql("DROP DATABASE logged")
    pg.stop()  # clean stop: the daemon reports the shutdown checkpoint flushed promptly
    pg.start()
    assert_matches(ps, tenant, timeline, pg, "after a primary restart")

    http.timeline_delete(tenant, timeline)
    assert pg.psql("SELECT count(*) FROM pg_replication_slots") == "0"
    assert not http.metrics().query("pageserver_wal_receiver_lag_bytes", **ids)


def test_primary_with_default_wal_settings_is_followed(pageserver, vanilla_pg):
    """Native redo covers every rmgr that changes pages (issues 28 and 29): a
    primary with PostgreSQL's default WAL settings is followed, and so is one
    that keeps consistency checking on for some rmgrs."""
    pg = vanilla_pg.init({"max_replication_slots": "4"}).start()
    assert pg.psql("SHOW wal_consistency_checking") == ""
    pageserver.allow_errors(*PRIMARY_GONE)  # the followed primaries stop at teardown
    http = pageserver.http_client()
    body = {"source": {"connstring": connstring(pg)}}
    info = http._json("POST", f"/v1/tenant/{http.tenant_create()}/timeline", json=body)
    assert pg.psql("SELECT slot_name FROM pg_replication_slots") == f"pageserver_{info['timeline_id']}"
    pg.psql("ALTER SYSTEM SET wal_consistency_checking = 'hash,gin'")
    pg.psql("SELECT pg_reload_conf()")
    info = http._json("POST", f"/v1/tenant/{http.tenant_create()}/timeline", json=body)
    assert f"pageserver_{info['timeline_id']}" in pg.psql("SELECT slot_name FROM pg_replication_slots").split()


def test_records_without_images_are_redone(pageserver, vanilla_pg):
    """A superuser session turns consistency checking off: the heap and index
    pages it changes (heap, btree, hash, GIN, GiST, SP-GiST, BRIN) carry no
    image and are redone natively; every page served equals the primary's."""
    pg = vanilla_pg.init({**PRIMARY_SETTINGS, "wal_compression": "zstd"}).start()
    ps = pageserver
    http, tenant, timeline = follow_primary(ps, pg, PRIMARY_GONE)
    pg.psql(
        "CREATE TABLE x (a int PRIMARY KEY, arr int[], p point, r int4range); "
        "CREATE INDEX ON x USING hash (a); CREATE INDEX ON x USING gin (arr) WITH (fastupdate = off); "
        "CREATE INDEX ON x USING gist (p); CREATE INDEX ON x USING spgist (r); CREATE INDEX ON x USING brin (a); "
        "INSERT INTO x VALUES (1, '{1}', point(1, 1), int4range(1, 2)); SELECT brin_summarize_new_values('x_a_idx1')"
    )
    # Their next changes of the pages (no full-page write since the last
    # checkpoint) carry no image.
    pg.psql(
        "SET wal_consistency_checking = ''; "
        "INSERT INTO x SELECT g, ARRAY[g], point(g, g), int4range(g, g + 1) FROM generate_series(2, 50) g"
    )
    lsn = parse_lsn(pg.psql("SELECT pg_current_wal_insert_lsn()"))
    wait_for_lsn(http, tenant, timeline, lsn)
    assert_matches(ps, tenant, timeline, pg, "records without images")


def test_kill9_during_ingest_loses_nothing_acknowledged(pageserver, vanilla_pg):
    """Ten rounds of kill -9 while the primary writes: after each restart the
    daemon has at least what the primary saw reported as flushed, the slot
    catches up, and the pages match at the end."""
    pg = vanilla_pg.init({**PRIMARY_SETTINGS, "wal_compression": "zstd"}).start()
    ps = pageserver
    http, tenant, timeline = follow_primary(ps, pg, PRIMARY_GONE)
    slot = f"pageserver_{timeline}"
    pg.psql("CREATE TABLE k (id int PRIMARY KEY, v text)")
    for round_ in range(10):
        pg.psql(f"INSERT INTO k SELECT g, md5(g::text) FROM generate_series({round_ * 2000 + 1}, {round_ * 2000 + 2000}) g")
        time.sleep(0.3)
        acknowledged = pg.psql(f"SELECT restart_lsn FROM pg_replication_slots WHERE slot_name = '{slot}'")
        ps.kill()
        ps.start()
        info = http.timeline_get(tenant, timeline)
        durable = parse_lsn(info["disk_consistent_lsn"])
        assert durable >= parse_lsn(acknowledged), f"round {round_}: slot at {acknowledged}, daemon durable at {info['disk_consistent_lsn']}"
    assert_matches(ps, tenant, timeline, pg, "after ten kill -9 rounds")
    # The slot follows the daemon's flush position once it has caught up.
    flushed = parse_lsn(http.timeline_get(tenant, timeline)["disk_consistent_lsn"])
    deadline = time.monotonic() + 30
    while parse_lsn(pg.psql(f"SELECT restart_lsn FROM pg_replication_slots WHERE slot_name = '{slot}'")) < flushed:
        assert time.monotonic() < deadline, "the slot did not advance to the daemon's flush position"
        time.sleep(0.2)


def test_primary_crash_and_restart_during_ingest(pageserver, vanilla_pg):
    """The primary is killed (immediate stop: crash recovery on restart)
    twice while pgbench writes and the daemon streams; it reconnects each
    time and serves the primary's pages afterwards."""
    pg = vanilla_pg.init({**PRIMARY_SETTINGS, "wal_compression": "zstd"}).start()
    ps = pageserver
    pg.pgbench_init(1)
    http, tenant, timeline = follow_primary(ps, pg, PRIMARY_GONE)
    for round_ in range(2):
        bench = subprocess.Popen(
            pg._cmd("pgbench", "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres", "-c", "2", "-T", "30", "postgres"),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/",
        )
        time.sleep(1.5)
        before = parse_lsn(http.timeline_get(tenant, timeline)["last_record_lsn"])
        pg.stop(mode="immediate")
        bench.wait(timeout=30)
        pg.start()
        info = wait_for_lsn(http, tenant, timeline, parse_lsn(pg.psql("SELECT pg_current_wal_insert_lsn()")))
        assert parse_lsn(info["last_record_lsn"]) > before, f"round {round_}: no progress past {before:X}"
    src = http.timeline_get(tenant, timeline)["wal_source"]
    assert src["state"] == "streaming", src
    assert http.metrics().value("pageserver_wal_receiver_reconnects_total") >= 2
    assert_matches(ps, tenant, timeline, pg, "after two primary crashes")


def test_attach_imported_timeline(pageserver, vanilla_pg, test_output_dir):
    """PUT .../source: a timeline imported from a pg_basebackup tar streams
    from its backup LSN on a slot created before the backup."""
    pg = vanilla_pg.init({**PRIMARY_SETTINGS, "wal_compression": "zstd"}).start()
    ps = pageserver
    ps.allow_errors(*PRIMARY_GONE)
    http = ps.http_client()
    pg.psql("CREATE TABLE before_backup AS SELECT generate_series(1, 1000) g")
    # The slot first (reserving WAL from now), then the backup: the slot holds
    # everything from the backup's start LSN on.
    pg.psql("SELECT pg_create_physical_replication_slot('imported', true)")
    tar = pg.basebackup_tar(test_output_dir / "bb")
    tenant = http.tenant_create()
    timeline = "0" * 31 + "2"
    http.import_basebackup(tenant, timeline, str(tar))
    pg.psql("CREATE TABLE after_backup AS SELECT generate_series(1, 1000) g")
    from fixtures.http import PageserverApiError

    with pytest.raises(PageserverApiError) as e:
        http._json("PUT", f"/v1/tenant/{tenant}/timeline/{timeline}/source", json={"connstring": connstring(pg), "slot": "nope"})
    assert e.value.status == 409 and "nope" in e.value.msg, e.value
    info = http._json(
        "PUT", f"/v1/tenant/{tenant}/timeline/{timeline}/source", json={"connstring": connstring(pg), "slot": "imported"}
    )
    assert info["wal_source"]["slot"] == "imported"
    # Setting it again replaces the source (its receiver restarts on the same slot).
    again = http._json(
        "PUT", f"/v1/tenant/{tenant}/timeline/{timeline}/source", json={"connstring": connstring(pg), "slot": "imported"}
    )
    assert again["wal_source"]["slot"] == "imported"
    assert_matches(ps, tenant, timeline, pg, "after attaching the imported timeline")
