"""Tablespaces (issue 27, item 8): relations, an index and a database in a
tablespace, SET TABLESPACE there and back, DROP TABLESPACE, on a followed
primary and on one bootstrapped while it has a tablespace. The pages served equal the primary's files wherever they live, and
an unmodified PostgreSQL starts on a `fullbackup` taken before and after the
drop, with the primary's rows; the tablespace is laid out in place as
`pg_tblspc/<oid>/PG_<major>_<catversion>/<db>` (the catalog version of the
primary's pg_control)."""

from __future__ import annotations

import os
import tarfile

import pytest

from fixtures.backup import fetch_backup, restore, table_checksums
from fixtures.http import PageserverApiError
from fixtures.pagestream import parse_lsn
from fixtures.vanilla_pg import VanillaPostgres, pg_bin_dir
from fixtures.wal_compare import compare_with_primary, follow_primary
from test_basebackup import fmt_lsn
from test_wal_ingest import PRIMARY_GONE, PRIMARY_SETTINGS, wait_for_lsn


# The catalog-version directory differs per major: all four.
@pytest.fixture(params=[15, 16, 17, 18], ids=lambda v: f"pg{v}")
def primary(request, test_output_dir, port_distributor):
    major = request.param
    bin_dir = pg_bin_dir(major)
    if bin_dir is None:
        pytest.fail(f"PostgreSQL {major} is not installed: run scripts/install-test-deps.sh")
    pg = VanillaPostgres(test_output_dir / f"pg{major}", port_distributor.get(), bin_dir=bin_dir)
    pg.major = major
    pg.init(PRIMARY_SETTINGS, checksums=True).start()
    yield pg
    pg.stop(mode="immediate")
    pg.release()


def catalog_version(pg) -> int:
    return int(pg.psql("SELECT catalog_version_no FROM pg_control_system()"))


def checkpoint_and_compare(ps, http, tenant, timelines: list[str], pg, what: str) -> tuple[int, dict[int, int]]:
    """Every page of every timeline equals the primary's at its current LSN;
    returns that LSN and the DbSize checked per database."""
    pg.psql("CHECKPOINT")
    lsn = parse_lsn(pg.psql("SELECT pg_current_wal_insert_lsn()"))
    # A record boundary, the same on every timeline (they ingest one WAL).
    lsn = parse_lsn(wait_for_lsn(http, tenant, timelines[0], lsn)["last_record_lsn"])
    sizes: dict[int, int] = {}
    for timeline in timelines:
        wait_for_lsn(http, tenant, timeline, lsn)
        res = compare_with_primary(ps, tenant, timeline, pg, lsn)
        assert res.pages > 100, res
        assert not res.mismatches, f"{what}: {len(res.mismatches)} mismatches:\n" + "\n".join(res.mismatches[:40])
        sizes = res.db_sizes
    return lsn, sizes


def bootstrap(http, tenant: str, pg) -> str:
    """A second timeline of `tenant` that bootstraps from `pg` as it is now."""
    body = {"source": {"connstring": f"postgres://postgres@127.0.0.1:{pg.port}/postgres"}}
    return http._json("POST", f"/v1/tenant/{tenant}/timeline", json=body)["timeline_id"]


def restored_at(ps, tenant, timeline, lsn: int, major: int, out, port: int) -> tuple[VanillaPostgres, list[str]]:
    tar = fetch_backup(ps, "fullbackup", tenant, timeline, out / f"full_{timeline[:8]}_{lsn:X}.tar", fmt_lsn(lsn))
    pg = restore(tar, out / f"restored_{timeline[:8]}_{lsn:X}", port, major)
    pg.start()
    return pg, tablespace_names(tar)


def tablespace_names(tar) -> list[str]:
    with tarfile.open(tar) as t:
        return [m.name for m in t.getmembers() if m.name.startswith("pg_tblspc/")]


BY_INDEX = "SET enable_seqscan = off; SET enable_bitmapscan = off; SELECT count(*) FROM tt WHERE v = 'updated'"
TT_V_TABLESPACE = "SELECT spcname FROM pg_class c JOIN pg_tablespace s ON s.oid = c.reltablespace WHERE relname = 'tt_v'"


def test_tablespaces_followed_and_restored(pageserver, primary, test_output_dir, port_distributor):
    """Timeline `followed` follows the primary from before its tablespaces
    exist; timeline `booted` bootstraps from it once ts1 holds a table, an
    index and a whole database (BASE_BACKUP sends ts1 as an archive of its
    own, and base.tar a pg_tblspc symlink to it). Both then follow moves
    into ts1 and back, and the drop."""
    ps, pg, major = pageserver, primary, primary.major
    http, tenant, followed = follow_primary(ps, pg, PRIMARY_GONE)
    version_dir = f"PG_{major}_{catalog_version(pg)}"
    loc1 = pg.mkdir(test_output_dir / "ts1")
    loc2 = pg.mkdir(test_output_dir / "ts2")
    pg.psql(f"CREATE TABLESPACE ts1 LOCATION '{loc1}'")
    ts1 = int(pg.psql("SELECT oid FROM pg_tablespace WHERE spcname = 'ts1'"))
    pg.psql(
        "CREATE TABLE tt (id int PRIMARY KEY, v text) TABLESPACE ts1; "
        "INSERT INTO tt SELECT g, md5(g::text) FROM generate_series(1, 3000) g; "
        "CREATE INDEX tt_v ON tt (v) TABLESPACE ts1; "
        "CREATE TABLE moved AS SELECT g AS x FROM generate_series(1, 2000) g; "
        "ALTER TABLE moved SET TABLESPACE ts1; "
        "UPDATE tt SET v = 'updated' WHERE id % 5 = 0"
    )
    pg.psql("CREATE DATABASE tsdb TABLESPACE ts1")
    pg.psql("CREATE TABLE inner_t AS SELECT g, g * 2 AS h FROM generate_series(1, 2000) g", dbname="tsdb")
    tsdb = int(pg.psql("SELECT oid FROM pg_database WHERE datname = 'tsdb'"))
    lsn_in, _ = checkpoint_and_compare(ps, http, tenant, [followed], pg, "relations and a database in ts1")
    expected_in = table_checksums(pg)

    # Bootstrap from a primary that has a tablespace; then more writes
    # there, and a table moved into it.
    booted = bootstrap(http, tenant, pg)
    pg.psql(
        "INSERT INTO tt SELECT g, 'updated' FROM generate_series(3001, 3500) g; "
        "CREATE TABLE into_ts AS SELECT g AS y FROM generate_series(1, 1500) g; "
        "ALTER TABLE into_ts SET TABLESPACE ts1"
    )
    pg.psql("INSERT INTO inner_t VALUES (-3, -6)", dbname="tsdb")
    into_ts = int(pg.psql("SELECT relfilenode FROM pg_class WHERE relname = 'into_ts'"))
    lsn_booted, sizes = checkpoint_and_compare(ps, http, tenant, [booted], pg, "bootstrapped with ts1")
    assert not (pg.datadir / "base" / str(tsdb)).exists()
    assert sizes.get(tsdb, 0) > 0, f"DbSize of {tsdb} (all in ts1) not checked: {sizes}"
    expected_booted = table_checksums(pg)

    # There and back again, then the drop; an empty tablespace stays.
    pg.psql("ALTER TABLE tt SET TABLESPACE pg_default; ALTER INDEX tt_v SET TABLESPACE pg_default")
    pg.psql("ALTER TABLE moved SET TABLESPACE pg_default; ALTER TABLE into_ts SET TABLESPACE pg_default")
    pg.psql("ALTER DATABASE tsdb SET TABLESPACE pg_default")
    pg.psql("INSERT INTO inner_t VALUES (-1, -2)", dbname="tsdb")
    pg.psql("DROP TABLESPACE ts1")
    pg.psql(f"CREATE TABLESPACE ts2 LOCATION '{loc2}'")
    ts2 = int(pg.psql("SELECT oid FROM pg_tablespace WHERE spcname = 'ts2'"))
    lsn_out, _ = checkpoint_and_compare(ps, http, tenant, [followed, booted], pg, "after SET TABLESPACE back and DROP TABLESPACE")
    expected_out = table_checksums(pg)

    out = test_output_dir
    restored, names = restored_at(ps, tenant, followed, lsn_in, major, out, port_distributor.get())
    try:
        assert f"pg_tblspc/{ts1}/{version_dir}/{tsdb}/PG_VERSION" in names, names
        assert f"pg_tblspc/{ts1}/{version_dir}/{tsdb}/pg_filenode.map" in names, names
        assert all(n.startswith(f"pg_tblspc/{ts1}") for n in names), names
        assert table_checksums(restored) == expected_in
        assert restored.psql(BY_INDEX).splitlines()[-1] == "600"
        assert restored.psql(TT_V_TABLESPACE) == "ts1"
    finally:
        restored.stop(mode="immediate")
        restored.remove()

    restored, names = restored_at(ps, tenant, booted, lsn_booted, major, out, port_distributor.get())
    try:
        assert f"pg_tblspc/{ts1}/{version_dir}/{tsdb}/PG_VERSION" in names, names
        assert f"pg_tblspc/{ts1}/{version_dir}/5/{into_ts}" in names, names
        assert all(n.startswith(f"pg_tblspc/{ts1}") for n in names), names
        assert table_checksums(restored) == expected_booted
        assert restored.psql(BY_INDEX).splitlines()[-1] == "1100"
        assert restored.psql(TT_V_TABLESPACE) == "ts1"
    finally:
        restored.stop(mode="immediate")
        restored.remove()

    # ts1 is gone from both timelines; the empty ts2 is there, usable.
    empty_ts2 = [f"pg_tblspc/{ts2}", f"pg_tblspc/{ts2}/{version_dir}"]
    full = fetch_backup(ps, "fullbackup", tenant, followed, out / "full_followed_out.tar", fmt_lsn(lsn_out))
    assert sorted(tablespace_names(full)) == empty_ts2
    restored, names = restored_at(ps, tenant, booted, lsn_out, major, out, port_distributor.get())
    try:
        assert sorted(names) == empty_ts2, names
        assert table_checksums(restored) == expected_out
        restored.psql("CREATE TABLE fresh TABLESPACE ts2 AS SELECT 1 AS one")
        assert restored.psql("SELECT one FROM fresh") == "1"
    finally:
        restored.stop(mode="immediate")
        restored.remove()


def test_import_refuses_tablespace_symlink(pageserver, small_backup):
    """A tar whose `pg_tblspc/<oid>` is a symlink (pg_basebackup -Ft) lacks
    that tablespace's files: refused naming it, instead of a timeline that
    silently lacks those relations."""
    http = pageserver.http_client()
    tenant = http.tenant_create()
    linked = pageserver.workdir.parent / "linked.tar"
    with tarfile.open(small_backup.path) as src, tarfile.open(linked, "w") as dst:
        for m in src:
            dst.addfile(m, src.extractfile(m) if m.isfile() else None)
        link = tarfile.TarInfo("pg_tblspc/16400")
        link.type, link.linkname = tarfile.SYMTYPE, "/srv/ts1"
        dst.addfile(link)
    with pytest.raises(PageserverApiError) as e:
        http.import_basebackup(tenant, os.urandom(16).hex(), str(linked))
    assert e.value.status == 400, e.value
    assert "'pg_tblspc/16400' is a symlink to '/srv/ts1'" in e.value.msg, e.value.msg
    assert not pageserver.temp_files()
    pageserver.allow_errors(r"(?i)import", r"(?i)symlink")
