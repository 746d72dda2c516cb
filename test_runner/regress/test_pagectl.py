"""`pagectl` (issue 31, item 2) against a real pageserver and primaries.

- `restore --lsn` and `--latest` of a timeline that follows a checksummed
  primary (created with `pagectl timeline follow`): an unmodified PostgreSQL
  of the primary's major starts on the directory with the rows of that LSN,
  `pg_checksums -c` finds it clean, a tablespace mapped elsewhere is a
  symlink to its directory (and an unmapped one stays in place); a
  non-empty data or tablespace directory is refused;
- `restore --time` (when the daemon serves `get_lsn_by_timestamp`);
- `timeline verify` on the daemon's files, and on a copy with a truncated
  layer (exit 3, start-up's error);
- the HTTP wrappers round-trip: create, list (table and `--json`), delete.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from fixtures.compare import import_backup
from fixtures.http import PageserverApiError
from fixtures.pagectl import api, pagectl
from fixtures.pagestream import parse_lsn
from fixtures.tcp_proxy import TcpProxy
from fixtures.pageserver import pagectl_bin
from fixtures.vanilla_pg import VanillaPostgres, pg_bin_dir, started_primary
from test_basebackup import fmt_lsn
from test_wal_ingest import PRIMARY_GONE, PRIMARY_SETTINGS, wait_for_lsn


@pytest.fixture(params=[15, 18], ids=lambda v: f"pg{v}")
def primary(request, test_output_dir, port_distributor):
    yield from started_primary(request.param, test_output_dir, port_distributor.get(), PRIMARY_SETTINGS, checksums=True)


def follow(ps, pg) -> tuple[str, str]:
    """A tenant and a timeline following `pg`, made with pagectl."""
    ps.allow_errors(*PRIMARY_GONE)
    tenant = api(ps, "tenant", "create", "--json").json()["id"]
    conn = f"postgres://postgres@127.0.0.1:{pg.port}/postgres"
    info = api(ps, "timeline", "follow", "--tenant", tenant, "--connstring", conn, "--json").json()
    assert info["wal_source"]["slot"] == f"pageserver_{info['timeline_id']}", info
    return tenant, info["timeline_id"]


def ingested(ps, pg, tenant: str, timeline: str) -> int:
    """The primary's insert LSN once the timeline has it: the LSN to restore at."""
    lsn = parse_lsn(pg.psql("SELECT pg_current_wal_insert_lsn()"))
    return parse_lsn(wait_for_lsn(ps.http_client(), tenant, timeline, lsn)["last_record_lsn"])


def target(root: Path, port: int, major: int) -> VanillaPostgres:
    """An unstarted cluster whose data directory pagectl is to write."""
    pg = VanillaPostgres(root, port, bin_dir=pg_bin_dir(major))
    if pg.root.exists():
        shutil.rmtree(pg.root)
    pg.mkdir(pg.root)
    pg.mkdir(pg.sockdir)
    return pg


def restore(ps, tenant, timeline, pg: VanillaPostgres, *args: str):
    return pagectl(
        "restore", "--pageserver", f"http://127.0.0.1:{ps.http_port}", "--tenant", tenant,
        "--timeline", timeline, "--pgdata", str(pg.datadir), "--port", str(pg.port), *args,
        as_postgres=True,
    )  # fmt: skip


def start(pg: VanillaPostgres) -> VanillaPostgres:
    """The settings a test cluster needs beside the port pagectl wrote."""
    with open(pg.datadir / "postgresql.conf", "a") as f:
        f.write(f"listen_addresses = '127.0.0.1'\nunix_socket_directories = '{pg.sockdir}'\nfsync = off\n")
    return pg.start()


def checksums_clean(pg: VanillaPostgres) -> None:
    out = pg.run("pg_checksums", "-c", "-D", str(pg.datadir)).stdout
    assert "Bad checksums:  0" in out and "Data checksum version: 1" in out, out


def test_restore_lsn_latest_tablespace(pageserver, primary, test_output_dir, port_distributor):
    ps, pg, major = pageserver, primary, primary.major
    tenant, timeline = follow(ps, pg)
    ts_loc = pg.mkdir(test_output_dir / "ts_primary")
    pg.psql(f"CREATE TABLESPACE ts LOCATION '{ts_loc}'")
    ts = int(pg.psql("SELECT oid FROM pg_tablespace WHERE spcname = 'ts'"))
    pg.psql(
        "CREATE TABLE t (id int PRIMARY KEY, v text); INSERT INTO t SELECT g, md5(g::text) FROM generate_series(1, 1000) g; "
        "CREATE TABLE tt (id int) TABLESPACE ts; INSERT INTO tt SELECT generate_series(1, 500)"
    )
    lsn1 = ingested(ps, pg, tenant, timeline)
    pg.psql("INSERT INTO t SELECT g, 'late' FROM generate_series(1001, 1500) g; INSERT INTO tt SELECT generate_series(501, 600)")
    ingested(ps, pg, tenant, timeline)

    # At lsn1, the tablespace mapped to a directory of its own.
    at1 = target(test_output_dir / "at1", port_distributor.get(), major)
    mapped = at1.root / "ts_mapped"
    res = restore(ps, tenant, timeline, at1, "--lsn", fmt_lsn(lsn1), "--tablespace-map", f"{ts}={mapped}").ok()
    assert f"pg_ctl -D {at1.datadir} start" in res.stdout, res.stdout
    assert "restored:" in res.stderr and "pages" in res.stderr, res.stderr
    link = at1.datadir / "pg_tblspc" / str(ts)
    assert link.is_symlink() and Path(os.readlink(link)) == mapped, link
    assert not (at1.datadir / "pagectl_restore_incomplete").exists()
    assert oct((at1.datadir).stat().st_mode & 0o777) == "0o700"
    checksums_clean(at1)
    start(at1)
    try:
        assert at1.psql("SELECT count(*), sum(id) FROM t") == "1000|500500"
        assert at1.psql("SELECT count(*) FROM tt") == "500"
        assert at1.psql("SELECT pg_tablespace_location(oid) FROM pg_tablespace WHERE spcname = 'ts'") == str(mapped)
    finally:
        at1.stop(mode="immediate")

    # Refused: a non-empty data directory; a non-empty mapped directory.
    again = restore(ps, tenant, timeline, at1, "--latest")
    assert again.code == 1 and "is not empty" in again.stderr, again
    at2 = target(test_output_dir / "at2", port_distributor.get(), major)
    busy = pg.mkdir(at2.root / "busy")
    (busy / "file").write_text("x")
    refused = restore(ps, tenant, timeline, at2, "--latest", "--tablespace-map", f"{ts}={busy}")
    assert refused.code == 1 and f"the directory of tablespace {ts}" in refused.stderr, refused
    assert not at2.datadir.exists(), "refused before anything is written"

    # The latest state, the tablespace in place.
    restore(ps, tenant, timeline, at2, "--latest").ok()
    assert (at2.datadir / "pg_tblspc" / str(ts)).is_dir() and not (at2.datadir / "pg_tblspc" / str(ts)).is_symlink()
    checksums_clean(at2)
    start(at2)
    try:
        assert at2.psql("SELECT count(*), count(*) FILTER (WHERE v = 'late') FROM t") == "1500|500"
        assert at2.psql("SELECT count(*) FROM tt") == "600"
    finally:
        at2.stop(mode="immediate")
    at1.remove()
    at2.remove()
    verify_timeline(ps, tenant, timeline, test_output_dir)


def verify_timeline(ps, tenant: str, timeline: str, out: Path) -> None:
    """`timeline verify` on the stopped daemon's files: clean; then on a copy
    with its largest layer truncated: exit 3 with start-up's error."""
    ps.http_client().timeline_checkpoint(tenant, timeline)
    ps.stop()
    args = ["timeline", "verify", "--tenant", tenant, "--timeline", timeline]
    res = pagectl(*args, "--workdir", str(ps.workdir)).ok()
    assert f"timeline {tenant}/{timeline}: ok:" in res.stdout, res.stdout
    copy = out / "workdir_copy"
    rel = Path("tenants") / tenant / "timelines" / timeline
    shutil.copytree(ps.workdir / rel, copy / rel)
    layers = [p for p in (copy / rel).iterdir() if "__" in p.name]
    largest = max(layers, key=lambda p: p.stat().st_size)
    size = largest.stat().st_size
    os.truncate(largest, size - 4096)
    res = pagectl(*args, "--workdir", str(copy))
    assert res.code == 3, res
    assert f"is {size - 4096} bytes, the manifest says {size}" in res.stderr, res.stderr


def test_restore_by_time(pageserver, port_distributor, test_output_dir):
    """`--time`: the rows committed before the moment, not those after; a
    moment before the first commit is refused naming kind "past"."""
    ps = pageserver
    pg = VanillaPostgres(test_output_dir / "pg15", port_distributor.get(), bin_dir=pg_bin_dir(15))
    pg.init(PRIMARY_SETTINGS).start()
    tenant = None
    try:
        tenant, timeline = follow(ps, pg)
        probe = f"/v1/tenant/{tenant}/timeline/{timeline}/get_lsn_by_timestamp?timestamp=2000-01-01T00:00:00Z"
        try:
            ps.http_client().request("GET", probe)
        except PageserverApiError as e:
            if "no route for" in e.msg:
                pytest.skip("this build does not serve get_lsn_by_timestamp: --time untested")
        pg.psql("CREATE TABLE t (id int); INSERT INTO t SELECT generate_series(1, 100)")
        moment = pg.psql("SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')")
        pg.psql("INSERT INTO t SELECT generate_series(101, 150)")
        ingested(ps, pg, tenant, timeline)
        at = target(test_output_dir / "at", port_distributor.get(), 15)
        restore(ps, tenant, timeline, at, "--time", moment).ok()
        start(at)
        try:
            assert at.psql("SELECT count(*) FROM t") == "100"
        finally:
            at.stop(mode="immediate")
        early = target(test_output_dir / "early", port_distributor.get(), 15)
        refused = restore(ps, tenant, timeline, early, "--time", "2000-01-01T00:00:00Z")
        assert refused.code == 1 and 'kind "past"' in refused.stderr, refused
    finally:
        if tenant is not None:
            ps.http_client().tenant_delete(tenant)  # before the primary stops
        pg.stop(mode="immediate")
        pg.release()


class CutProxy(TcpProxy):
    """Stalls every connection once one has passed `cut_after` bytes from
    the server: pagectl's fullbackup stream (its API answers are small)."""

    cut_after = 1 << 20

    def _maybe_flip(self, data, conn, offset):
        if offset > self.cut_after:
            self.stall()


def test_interrupted_restore_is_marked_incomplete(pageserver, small_backup, port_distributor, test_output_dir):
    """The stream breaks after 1 MiB: exit 1 naming the directory, which is
    marked incomplete and has no global/pg_control (no PostgreSQL starts on
    it); a second restore into it is refused as an incomplete restore."""
    ps = pageserver
    tl = import_backup(ps, small_backup)
    pgdata = test_output_dir / "cut" / "pgdata"
    with CutProxy(ps.http_port, port_distributor.get(), lifetime=60) as proxy:
        args = ["restore", "--pageserver", f"http://127.0.0.1:{proxy.port}", "--tenant", tl.tenant_id]
        args += ["--timeline", tl.timeline_id, "--latest", "--pgdata", str(pgdata), "--timeout", "5s"]
        proc = subprocess.Popen([str(pagectl_bin()), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while not proxy._stalled.is_set():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proxy.stop()  # the connection breaks mid-body
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 1, (out, err)
    assert f"{pgdata} is incomplete (marked by pagectl_restore_incomplete" in err, err
    assert (pgdata / "pagectl_restore_incomplete").exists()
    assert not (pgdata / "global" / "pg_control").exists()
    assert (pgdata / "base").is_dir(), "the restore had started"
    again = pagectl("restore", "--pageserver", f"http://127.0.0.1:{ps.http_port}", *args[3:])
    assert again.code == 1 and "holds an incomplete restore" in again.stderr, again
    ps.allow_errors("fullbackup .*over HTTP .*failed while streaming")


def test_wrappers_round_trip(pageserver):
    ps = pageserver
    tenant = api(ps, "tenant", "create", "--json").json()["id"]
    table = api(ps, "tenant", "list").ok().stdout
    assert table.startswith("TENANT") and tenant in table and "Active" in table, table
    assert tenant in [t["id"] for t in api(ps, "tenant", "list", "--json").json()]

    timeline = api(ps, "timeline", "create", "--tenant", tenant, "--pg-version", "15").ok().stdout.strip()
    assert len(timeline) == 32, timeline
    listed = api(ps, "timeline", "list", "--tenant", tenant, "--json").json()
    assert [t["timeline_id"] for t in listed] == [timeline], listed
    table = api(ps, "timeline", "list", "--tenant", tenant).ok().stdout
    assert timeline in table and "Active" in table, table

    api(ps, "timeline", "delete", "--tenant", tenant, "--timeline", timeline).ok()
    assert api(ps, "timeline", "list", "--tenant", tenant, "--json").json() == []
    gone = api(ps, "timeline", "delete", "--tenant", tenant, "--timeline", timeline)
    assert gone.code == 1 and "404" in gone.stderr and timeline in gone.stderr, gone

    api(ps, "tenant", "delete", tenant).ok()
    assert tenant not in [t["id"] for t in api(ps, "tenant", "list", "--json").json()]
    assert pagectl("tenant", "frobnicate").code == 2
