"""WAL a standby must refuse (issue 27, item 2): a primary that ran with
`wal_level = minimal` wrote WAL from which relations cannot be rebuilt (a
table created and loaded in one transaction has no WAL for its rows). The
daemon stops that timeline's ingest at the PARAMETER_CHANGE record, as a
PostgreSQL standby does, says so in the timeline detail and the metrics,
does not reconnect, and keeps serving what came before. PostgreSQL 15."""

from __future__ import annotations

import re
import subprocess
import time

import pytest

from fixtures.backup import fetch_backup, restore
from fixtures.pagestream import parse_lsn
from fixtures.vanilla_pg import VanillaPostgres, pg_bin_dir
from fixtures.wal_compare import follow_primary
from fixtures.utils import fmt_lsn
from test_basebackup import caught_up
from test_wal_ingest import PRIMARY_SETTINGS

# The slot is dropped while the primary runs with wal_level = minimal (a
# physical slot stops it from starting) and re-created after: the daemon's
# sessions fail meanwhile.
ALLOWED = [r"replication failed: .*", r"WAL refused: WAL was generated with wal_level=minimal"]


@pytest.fixture
def primary(test_output_dir, port_distributor):
    bin_dir = pg_bin_dir(15)
    if bin_dir is None:
        pytest.fail("PostgreSQL 15 is not installed: run scripts/install-test-deps.sh")
    pg = VanillaPostgres(test_output_dir / "pg15", port_distributor.get(), bin_dir=bin_dir)
    # wal_keep_size: the WAL after the slot's drop stays for the daemon.
    pg.init({**PRIMARY_SETTINGS, "wal_compression": "zstd", "wal_keep_size": "'256MB'", "autovacuum": "off"}).start()
    yield pg
    pg.stop(mode="immediate")
    pg.release()


def drop_slot(pg, slot: str) -> None:
    """Drop the daemon's slot (ending its session first; it reconnects)."""
    deadline = time.monotonic() + 10
    while True:
        pg.psql(f"SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = '{slot}' AND active")
        try:
            pg.psql(f"SELECT pg_drop_replication_slot('{slot}')")
            return
        except RuntimeError:
            assert time.monotonic() < deadline, "the slot stayed active"
            time.sleep(0.01)


def restart_with(pg, **settings: str) -> None:
    for k, v in settings.items():
        pg.psql(f"ALTER SYSTEM SET {k} = {v}")
    pg.stop()
    pg.start()


def parameter_change_lsn(pg, start: int) -> int:
    """The LSN of the PARAMETER_CHANGE to wal_level=minimal (pg_waldump)."""
    # pg_waldump exits 1 at the end of the WAL ("invalid record length"): read its output anyway.
    cmd = pg._cmd("pg_waldump", "-p", str(pg.datadir / "pg_wal"), "-s", fmt_lsn(start), "-r", "XLOG")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd="/").stdout
    for line in out.splitlines():
        if "PARAMETER_CHANGE" in line and "wal_level=minimal" in line:
            return parse_lsn(re.search(r"lsn: ([0-9A-F]+/[0-9A-F]+)", line).group(1))
    raise AssertionError(f"no PARAMETER_CHANGE to minimal after {fmt_lsn(start)}:\n{out}")


def test_wal_level_minimal_stops_ingest(pageserver, primary, test_output_dir, port_distributor):
    pg = primary
    http, tenant, timeline = follow_primary(pageserver, pg, ALLOWED)
    pg.psql("CREATE TABLE before (id int PRIMARY KEY); INSERT INTO before SELECT generate_series(1, 1000)")
    before_lsn = caught_up(http, tenant, timeline, pg)
    slot = http.timeline_get(tenant, timeline)["wal_source"]["slot"]

    drop_slot(pg, slot)
    restart_with(pg, wal_level="minimal", max_wal_senders="0")
    # Created and loaded in one transaction: minimal WAL skips the rows.
    pg.psql("BEGIN; CREATE TABLE skipped (id int); COPY skipped FROM PROGRAM 'seq 1 100000'; COMMIT")
    restart_with(pg, wal_level="replica", max_wal_senders="4")
    pg.psql(f"SELECT pg_create_physical_replication_slot('{slot}', true)")
    pg.psql("INSERT INTO before SELECT generate_series(1001, 2000)")
    refused_at = parameter_change_lsn(pg, before_lsn)

    deadline = time.monotonic() + 40
    while (src := http.timeline_get(tenant, timeline)["wal_source"])["state"] != "stopped":
        assert time.monotonic() < deadline, f"ingest did not stop: {src}"
        time.sleep(0.1)
    info = http.timeline_get(tenant, timeline)
    err = info["wal_source"]["last_error"]
    assert "WAL was generated with wal_level=minimal, cannot continue recovering" in err, err
    assert fmt_lsn(refused_at) in err, err
    last = parse_lsn(info["last_record_lsn"])
    assert before_lsn <= last <= refused_at, (fmt_lsn(before_lsn), info["last_record_lsn"], fmt_lsn(refused_at))

    metrics = http.metrics()
    assert metrics.value("pageserver_wal_receiver_refusals_total", reason="wal_level_minimal") == 1
    assert metrics.value("pageserver_wal_receiver_stopped", tenant_id=tenant, timeline_id=timeline) == 1
    # Stopped, not retrying.
    reconnects = metrics.value("pageserver_wal_receiver_reconnects_total")
    time.sleep(1.5)
    assert http.metrics().value("pageserver_wal_receiver_reconnects_total") == reconnects
    assert http.timeline_get(tenant, timeline)["wal_source"]["state"] == "stopped"

    # What was ingested before the refusal is served.
    tar = fetch_backup(pageserver, "fullbackup", tenant, timeline, test_output_dir / "full.tar", fmt_lsn(last))
    restored = restore(tar, test_output_dir / "restored", port_distributor.get(), 15)
    restored.start()
    try:
        assert restored.psql("SELECT count(*), sum(id) FROM before") == "1000|500500"
        assert restored.psql("SELECT to_regclass('skipped') IS NULL") == "t"
    finally:
        restored.stop(mode="immediate")
        restored.remove()
