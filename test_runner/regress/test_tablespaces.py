"""Tablespaces (issue 27, item 8): relations, an index and a database in a
tablespace, SET TABLESPACE there and back, DROP TABLESPACE, on a followed
primary. The pages served equal the primary's files wherever they live, and
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


def checkpoint_and_compare(ps, http, tenant, timeline, pg, what: str) -> int:
    pg.psql("CHECKPOINT")
    lsn = parse_lsn(pg.psql("SELECT pg_current_wal_insert_lsn()"))
    lsn = parse_lsn(wait_for_lsn(http, tenant, timeline, lsn)["last_record_lsn"])
    res = compare_with_primary(ps, tenant, timeline, pg, lsn)
    assert res.pages > 100, res
    assert not res.mismatches, f"{what}: {len(res.mismatches)} mismatches:\n" + "\n".join(res.mismatches[:40])
    return lsn


def restored_at(ps, tenant, timeline, lsn: int, major: int, out, port: int) -> tuple[VanillaPostgres, list[str]]:
    tar = fetch_backup(ps, "fullbackup", tenant, timeline, out / f"full_{lsn:X}.tar", fmt_lsn(lsn))
    with tarfile.open(tar) as t:
        names = [m.name for m in t.getmembers() if m.name.startswith("pg_tblspc/")]
    pg = restore(tar, out / f"restored_{lsn:X}", port, major)
    pg.start()
    return pg, names


def test_tablespaces_followed_and_restored(pageserver, primary, test_output_dir, port_distributor):
    ps, pg, major = pageserver, primary, primary.major
    http, tenant, timeline = follow_primary(ps, pg, PRIMARY_GONE)
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
    lsn_in = checkpoint_and_compare(ps, http, tenant, timeline, pg, "relations and a database in ts1")
    expected_in = table_checksums(pg)

    # There and back again, then the drop; an empty tablespace stays.
    pg.psql("ALTER TABLE tt SET TABLESPACE pg_default; ALTER INDEX tt_v SET TABLESPACE pg_default")
    pg.psql("ALTER TABLE moved SET TABLESPACE pg_default")
    pg.psql("ALTER DATABASE tsdb SET TABLESPACE pg_default")
    pg.psql("INSERT INTO inner_t VALUES (-1, -2)", dbname="tsdb")
    pg.psql("DROP TABLESPACE ts1")
    pg.psql(f"CREATE TABLESPACE ts2 LOCATION '{loc2}'")
    ts2 = int(pg.psql("SELECT oid FROM pg_tablespace WHERE spcname = 'ts2'"))
    lsn_out = checkpoint_and_compare(ps, http, tenant, timeline, pg, "after SET TABLESPACE back and DROP TABLESPACE")
    expected_out = table_checksums(pg)

    out = test_output_dir
    restored, names = restored_at(ps, tenant, timeline, lsn_in, major, out, port_distributor.get())
    try:
        assert f"pg_tblspc/{ts1}/{version_dir}/{tsdb}/PG_VERSION" in names, names
        assert f"pg_tblspc/{ts1}/{version_dir}/{tsdb}/pg_filenode.map" in names, names
        assert all(n.startswith(f"pg_tblspc/{ts1}") for n in names), names
        assert table_checksums(restored) == expected_in
        by_index = "SET enable_seqscan = off; SET enable_bitmapscan = off; SELECT count(*) FROM tt WHERE v = 'updated'"
        assert restored.psql(by_index).splitlines()[-1] == "600"
        assert restored.psql("SELECT spcname FROM pg_class c JOIN pg_tablespace s ON s.oid = c.reltablespace WHERE relname = 'tt_v'") == "ts1"
    finally:
        restored.stop(mode="immediate")
        restored.remove()

    restored, names = restored_at(ps, tenant, timeline, lsn_out, major, out, port_distributor.get())
    try:
        # ts1 is gone; the empty ts2 is there, usable.
        assert sorted(names) == [f"pg_tblspc/{ts2}", f"pg_tblspc/{ts2}/{version_dir}"], names
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
