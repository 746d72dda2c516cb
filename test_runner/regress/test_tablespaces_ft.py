"""Tablespaces at import and bootstrap (issue 27, item 8): one primary per
major with a tablespace at a location (ts1) and an in-place one (t,
`allow_in_place_tablespaces`).

- Bootstrap: `BASE_BACKUP` sends each tablespace's archive before base.tar;
  the import is seeded with the start LSN and major, so they are imported
  as they come (nothing spilled).
- HTTP import of the whole `pg_basebackup -Ft` directory as one tar (`tar
  -C <dir> -cf - .`): base.tar, one `<oid>.tar` per tablespace,
  backup_manifest. base.tar alone is refused, naming the tablespace its
  `tablespace_map` lists (it used to be imported without it).

Each timeline's pages equal the primary's files, and an unmodified
PostgreSQL started on its `fullbackup` has the primary's rows."""

from __future__ import annotations

import os
import subprocess

import pytest

from fixtures.backup import table_checksums
from fixtures.http import PageserverApiError
from fixtures.pagestream import parse_lsn
from fixtures.vanilla_pg import started_primary
from fixtures.wal_compare import compare_with_primary
from test_tablespaces import bootstrap, catalog_version, checkpoint_and_compare, restored_at
from test_wal_ingest import PRIMARY_GONE, PRIMARY_SETTINGS


@pytest.fixture(params=[15, 18], ids=lambda v: f"pg{v}")
def primary(request, test_output_dir, port_distributor):
    settings = {**PRIMARY_SETTINGS, "allow_in_place_tablespaces": "on"}
    yield from started_primary(request.param, test_output_dir, port_distributor.get(), settings, checksums=True)


def restored_rows(ps, tenant, timeline, lsn, pg, out, port, expected, tablespaces: list[str]) -> None:
    """An unmodified PostgreSQL on `fullbackup` at `lsn` has `expected`
    rows, and the tablespaces in place (`pg_tblspc/<oid>/PG_<major>_<cat>`)."""
    restored, names = restored_at(ps, tenant, timeline, lsn, pg.major, out, port)
    try:
        for ts in tablespaces:
            assert ts in names, f"{ts} not in {names}"
        assert table_checksums(restored) == expected
    finally:
        restored.stop(mode="immediate")
        restored.remove()


def test_tablespaces_bootstrap_and_ft_directory_import(pageserver, primary, test_output_dir, port_distributor):
    ps, pg, out = pageserver, primary, test_output_dir
    ps.allow_errors(r"(?i)import", r"(?i)tablespace_map", *PRIMARY_GONE)
    http = ps.http_client()
    tenant = http.tenant_create()
    version_dir = f"PG_{pg.major}_{catalog_version(pg)}"
    loc = pg.mkdir(out / "ts1")
    pg.psql(f"CREATE TABLESPACE ts1 LOCATION '{loc}'")
    pg.psql("CREATE TABLESPACE t LOCATION ''")
    ts1, t = (int(pg.psql(f"SELECT oid FROM pg_tablespace WHERE spcname = '{n}'")) for n in ("ts1", "t"))
    assert (pg.datadir / "pg_tblspc" / str(t)).is_dir() and not (pg.datadir / "pg_tblspc" / str(t)).is_symlink()
    pg.psql(
        "CREATE TABLE in_ts1 (id int PRIMARY KEY, v text) TABLESPACE ts1; "
        "INSERT INTO in_ts1 SELECT g, md5(g::text) FROM generate_series(1, 3000) g; "
        "CREATE TABLE in_t TABLESPACE t AS SELECT g AS id, md5(g::text) AS v FROM generate_series(1, 3000) g; "
        "CREATE INDEX in_t_v ON in_t (v) TABLESPACE t"
    )
    pg.psql("VACUUM")
    in_ts1, in_t = (pg.psql(f"SELECT relfilenode FROM pg_class WHERE relname = '{n}'") for n in ("in_ts1", "in_t"))
    expected = table_checksums(pg)
    tablespaces = [f"pg_tblspc/{ts1}/{version_dir}/5/{in_ts1}", f"pg_tblspc/{t}/{version_dir}/5/{in_t}"]

    # Bootstrap: the tablespace archives come first and are not spilled.
    booted = bootstrap(http, tenant, pg)
    assert ps.log_contains("spilled them") is None, ps.log_contains("spilled them")
    lsn, _ = checkpoint_and_compare(ps, http, tenant, [booted], pg, "bootstrapped with ts1 and in-place t")
    restored_rows(ps, tenant, booted, lsn, pg, out, port_distributor.get(), expected, tablespaces)

    # pg_basebackup -Ft: base.tar, <ts1>.tar, <t>.tar (an in-place
    # tablespace, in no tablespace_map line), backup_manifest. PostgreSQL
    # 15 lists only symlinks as tablespaces and skips pg_tblspc with
    # -Ft: it leaves an in-place tablespace out altogether, so there t goes.
    archives = ["backup_manifest", "base.tar", f"{ts1}.tar", f"{t}.tar"]
    if pg.major == 15:
        pg.psql("DROP TABLE in_t")
        pg.psql("DROP TABLESPACE t")
        expected, tablespaces, archives = table_checksums(pg), tablespaces[:1], archives[:3]
    backup = out / "ft"
    pg.basebackup_tar(backup)
    assert sorted(os.listdir(backup)) == sorted(archives)
    alone = os.urandom(16).hex()
    with pytest.raises(PageserverApiError) as e:
        http.import_basebackup(tenant, alone, str(backup / "base.tar"))
    assert e.value.status == 400, e.value
    assert f"tablespace_map names tablespace {ts1} at '{loc}'" in e.value.msg, e.value.msg
    assert f"({ts1}.tar) are missing" in e.value.msg, e.value.msg

    whole = out / "ft.tar"
    subprocess.run(["tar", "-C", str(backup), "-cf", str(whole), "."], check=True)
    imported = os.urandom(16).hex()
    info = http.import_basebackup(tenant, imported, str(whole))
    lsn = parse_lsn(info["last_record_lsn"])
    res = compare_with_primary(ps, tenant, imported, pg, lsn)
    assert res.pages > 100, res
    assert not res.mismatches, f"{len(res.mismatches)} mismatches:\n" + "\n".join(res.mismatches[:40])
    restored_rows(ps, tenant, imported, lsn, pg, out, port_distributor.get(), expected, tablespaces)
