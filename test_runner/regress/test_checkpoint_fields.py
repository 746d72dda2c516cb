"""The checkpoint a backup carries follows PostgreSQL's redo, not the latest
checkpoint record alone: multixacts created while a spread (online)
checkpoint runs are past that checkpoint's `nextMulti`, and an unmodified
PostgreSQL started on a `fullbackup` taken after the CHECKPOINT_ONLINE
record must know them (issue 27, item 7). Checksummed primaries of all four
majors."""

from __future__ import annotations

import threading
import time

import pytest

from fixtures.backup import fetch_backup, restore
from fixtures.vanilla_pg import VanillaPostgres, pg_bin_dir
from fixtures.wal_compare import follow_primary
from fixtures.utils import fmt_lsn
from test_basebackup import caught_up
from test_wal_ingest import PRIMARY_GONE, PRIMARY_SETTINGS, WAL_COMPRESSION

# A non-immediate checkpoint sleeps 100 ms after each buffer it writes while
# ahead of schedule: with ~60 dirty buffers it runs for several seconds.
# No timed checkpoint meanwhile; no autovacuum (no VM pages: see item 1).
SETTINGS = {
    **PRIMARY_SETTINGS,
    "checkpoint_timeout": "'300s'",
    "checkpoint_completion_target": "0.9",
    "autovacuum": "off",
}


@pytest.fixture(params=[15, 16, 17, 18], ids=lambda v: f"pg{v}")
def checksummed_primary(request, test_output_dir, port_distributor):
    major = request.param
    bin_dir = pg_bin_dir(major)
    if bin_dir is None:
        pytest.fail(f"PostgreSQL {major} is not installed: run scripts/install-test-deps.sh")
    pg = VanillaPostgres(test_output_dir / f"pg{major}", port_distributor.get(), bin_dir=bin_dir)
    pg.major = major
    pg.init({**SETTINGS, "wal_compression": WAL_COMPRESSION[major]}, checksums=True).start()
    yield pg
    pg.stop(mode="immediate")
    pg.release()


def share_lock_rounds(pg, rounds: int = 3, sessions: int = 3) -> None:
    """Several sessions share-lock the same rows at once: new multixacts."""
    sql = "BEGIN; SELECT count(*) FROM (SELECT * FROM t WHERE id <= 20 FOR SHARE) s; SELECT pg_sleep(0.3); COMMIT"
    for _ in range(rounds):
        threads = [threading.Thread(target=pg.psql, args=(sql,)) for _ in range(sessions)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()


def next_multi(pg) -> int:
    return int(pg.psql("SELECT next_multixact_id FROM pg_control_checkpoint()"))


def test_multixacts_during_online_checkpoint(pageserver, checksummed_primary, test_output_dir, port_distributor):
    pg, major = checksummed_primary, checksummed_primary.major
    assert pg.psql("SHOW data_checksums") == "on"
    pg.psql("CREATE TABLE t (id int PRIMARY KEY, v int); INSERT INTO t SELECT g, g FROM generate_series(1, 200) g")
    pg.psql("CREATE TABLE filler (g int, pad text); INSERT INTO filler SELECT g, repeat('x', 900) FROM generate_series(1, 300) g")
    http, tenant, timeline = follow_primary(pageserver, pg, PRIMARY_GONE)
    pg.psql("CHECKPOINT")
    pg.psql("UPDATE filler SET g = g + 1")  # ~70 dirty buffers for the next checkpoint

    # pg_backup_start(fast => false) requests a spread checkpoint and waits for it.
    backup = threading.Thread(
        target=pg.run,
        args=("psql", "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres", "-v", "ON_ERROR_STOP=1",
              "-c", "SELECT pg_backup_start('spread', false)", "-c", "SELECT pg_backup_stop(false)"),
    )
    backup.start()
    deadline = time.monotonic() + 10
    while pg.psql("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'CheckpointWriteDelay'") == "0":
        assert time.monotonic() < deadline, "the spread checkpoint did not start"
        time.sleep(0.05)
    share_lock_rounds(pg)
    assert backup.is_alive(), "the checkpoint ended before the multixacts were made: make it longer"
    backup.join()

    lsn = caught_up(http, tenant, timeline, pg)  # past the CHECKPOINT_ONLINE record
    stale = next_multi(pg)
    pg.psql("CHECKPOINT")
    primary_next = next_multi(pg)
    primary_oid = int(pg.psql("SELECT next_oid FROM pg_control_checkpoint()"))
    assert stale < primary_next, f"no multixact was made during the spread checkpoint ({stale} >= {primary_next})"

    tar = fetch_backup(pageserver, "fullbackup", tenant, timeline, test_output_dir / "full.tar", fmt_lsn(lsn))
    restored = restore(tar, test_output_dir / "restored", port_distributor.get(), major)
    restored.start()
    try:
        # The checkpoint the restored server started from (its pg_control:
        # read through SQL, as 17's build has no pg_controldata).
        control = restored.psql("SELECT next_multixact_id, next_oid FROM pg_control_checkpoint()")
        next_multi_restored, next_oid_restored = (int(x) for x in control.split("|"))
        assert next_multi_restored >= primary_next, control
        assert next_oid_restored >= primary_oid, control
        assert restored.psql("SHOW data_checksums") == "on"
        # Locking reads the multixacts of the rows' xmax.
        got = restored.psql("SELECT count(*), sum(v) FROM (SELECT * FROM t WHERE id <= 20 FOR SHARE) s")
        assert got == "20|210", got
        assert restored.psql("SELECT count(*) FROM t") == "200"
        # A new multixact on the restored server gets an id never used before.
        restored.psql("BEGIN; SELECT * FROM t WHERE id = 1 FOR SHARE; COMMIT")
    finally:
        restored.stop(mode="immediate")
        restored.remove()
