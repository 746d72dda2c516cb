#!/usr/bin/env bash
# Writes the extra WAL of fixtures.rs's `heap_redo_matches_postgres_on_extra_wal`
# (not kept in the repository: 64 MiB per major).
#
# usage (as root; the server runs as the postgres user):
#   extra_wal.sh NAME BINDIR OUTDIR     e.g. extra_wal.sh pg15 /usr/lib/postgresql/15/bin /tmp/heapwal
# then HEAP_REDO_EXTRA_WAL=OUTDIR cargo test -p postgres_ffi --lib redo::heap::fixtures
#
# A throw-away cluster with wal_consistency_checking = 'heap,heap2' and
# wal_level = replica (so updates compress prefix/suffix) runs inserts,
# HOT and cold updates (same page, other page, new page), deletes, every row
# lock strength, a lock of a concurrently updated row (LOCK_UPDATED),
# ON CONFLICT (speculative insert and CONFIRM), COPY (MULTI_INSERT),
# VACUUM and VACUUM FREEZE, then locks and updates of frozen pages (18:
# VM block references). OUTDIR/NAME.wal is the whole segments from the
# start of the workload, OUTDIR/NAME.start the LSN of its first byte.
set -euo pipefail
name=$1; bin=$2; outdir=$3; PORT=${PORT:-5588}
mkdir -p "$outdir"
CLIENT=/usr/lib/postgresql/15/bin
tmp=$(mktemp -d /tmp/heapwal.XXXXXX); chown postgres "$tmp"
as_pg() { runuser -u postgres -- "$@"; }
as_pg "$bin/initdb" -D "$tmp/data" -U postgres --no-sync >/dev/null
cat >>"$tmp/data/postgresql.conf" <<CONF
listen_addresses = ''
unix_socket_directories = '$tmp'
port = $PORT
fsync = off
wal_level = replica
wal_consistency_checking = 'heap,heap2'
autovacuum = off
max_wal_size = 4GB
wal_keep_size = 4GB
CONF
as_pg "$bin/pg_ctl" -D "$tmp/data" -l "$tmp/log" -w start >/dev/null
seq 1 500 | awk '{print $1 ",copied" $1}' > /tmp/heapwal_copy.csv; chmod 644 /tmp/heapwal_copy.csv
psql=(as_pg "$CLIENT/psql" -h "$tmp" -p $PORT -U postgres -X -q -v ON_ERROR_STOP=1 -At)
"${psql[@]}" -c "CREATE TABLE h(id int primary key, v text, w text) WITH (fillfactor=50)" 
"${psql[@]}" -c "CREATE TABLE n(a int, b text)"  # no index: prune may mark unused directly
"${psql[@]}" -c "SELECT 1" >/dev/null
"${psql[@]}" -c "SELECT pg_switch_wal()" >/dev/null
start=$("${psql[@]}" -c "SELECT pg_current_wal_insert_lsn()")
cat <<'SQL' | "${psql[@]}" >/dev/null
INSERT INTO h SELECT g, repeat('a', 40) || g, repeat('b', 60) FROM generate_series(1, 3000) g;
INSERT INTO n SELECT g, repeat('c', 30) FROM generate_series(1, 2000) g;
UPDATE h SET w = w || 'x' WHERE id % 5 = 0;
UPDATE h SET w = 'y' || w WHERE id % 5 = 1;
UPDATE h SET v = 'mid' || v || 'q' WHERE id % 5 = 2;
UPDATE h SET id = id + 100000 WHERE id % 13 = 0;
UPDATE h SET v = repeat('z', 3000) WHERE id % 97 = 3;
DELETE FROM h WHERE id % 7 = 0;
BEGIN; SELECT count(*) FROM (SELECT * FROM h WHERE id < 60 FOR UPDATE) s; COMMIT;
BEGIN; SELECT count(*) FROM (SELECT * FROM h WHERE id BETWEEN 60 AND 90 FOR SHARE) s; COMMIT;
BEGIN; SELECT count(*) FROM (SELECT * FROM h WHERE id BETWEEN 91 AND 120 FOR KEY SHARE) s; COMMIT;
BEGIN; SELECT count(*) FROM (SELECT * FROM h WHERE id BETWEEN 121 AND 140 FOR NO KEY UPDATE) s; COMMIT;
INSERT INTO h VALUES (1, 'dup', 'dup') ON CONFLICT DO NOTHING;
INSERT INTO h VALUES (500000, 'spec', 'spec') ON CONFLICT DO NOTHING;
INSERT INTO h VALUES (2, 'upsert', 'u') ON CONFLICT (id) DO UPDATE SET w = 'upserted';
BEGIN; UPDATE h SET w = 'rolled back' WHERE id % 11 = 1; ROLLBACK;
DELETE FROM n WHERE a % 3 = 0;
UPDATE n SET b = b || 'u' WHERE a % 3 = 1;
SELECT count(*) FROM h;
SELECT count(*) FROM n;
VACUUM h;
VACUUM n;
UPDATE h SET w = w || 'second' WHERE id % 4 = 0;
DELETE FROM h WHERE id % 9 = 0;
SELECT count(*) FROM h;
VACUUM (FREEZE) h;
VACUUM (FREEZE) n;
INSERT INTO h SELECT g, 'late', 'late' FROM generate_series(200001, 200300) g;
UPDATE h SET w = 'after freeze' WHERE id % 17 = 0;
DELETE FROM n;
VACUUM n;
VACUUM (FREEZE) h;
VACUUM (FREEZE) n;
BEGIN; SELECT count(*) FROM (SELECT * FROM h WHERE id BETWEEN 300 AND 330 FOR UPDATE) s; COMMIT;
COPY n FROM '/tmp/heapwal_copy.csv' WITH (FORMAT csv);
UPDATE h SET id = id + 1000000 WHERE id BETWEEN 400 AND 440;
UPDATE h SET v = repeat('w', 2000) WHERE id BETWEEN 500 AND 520;
CREATE TABLE m(a int, b text);
INSERT INTO m SELECT g, 'm' || g FROM generate_series(1, 2000) g;
DELETE FROM m WHERE a % 2 = 0;
VACUUM (FREEZE) m;
COPY m FROM '/tmp/heapwal_copy.csv' WITH (FORMAT csv);
SQL
( "${psql[@]}" -c "BEGIN; UPDATE h SET w = 'concurrent' WHERE id BETWEEN 600 AND 610; SELECT pg_sleep(3); COMMIT;" >/dev/null ) &
sleep 1
"${psql[@]}" -c "SELECT count(*) FROM (SELECT * FROM h WHERE id BETWEEN 600 AND 610 FOR KEY SHARE) s" >/dev/null
wait
"${psql[@]}" -c "SELECT 1" >/dev/null
end=$("${psql[@]}" -c "SELECT pg_current_wal_insert_lsn()")
"${psql[@]}" -c "SELECT pg_switch_wal()" >/dev/null
as_pg "$bin/pg_ctl" -D "$tmp/data" -w stop >/dev/null
python3 - "$tmp/data/pg_wal" "$start" "$end" "$outdir/$name" <<'PY'
import os, sys
d, s, e, out = sys.argv[1:]
def lsn(t): hi, lo = t.split('/'); return (int(hi,16)<<32)|int(lo,16)
SEG = 16*1024*1024
s, e = lsn(s), lsn(e)
files = sorted(f for f in os.listdir(d) if len(f) == 24)
tli = files[0][:8]
data = b''
seg = s // SEG
while seg * SEG <= e:
    fn = "%s%08X%08X" % (tli, seg // 256, seg % 256)
    data += open(os.path.join(d, fn), 'rb').read()
    seg += 1
open(out + '.wal', 'wb').write(data)
open(out + '.start', 'w').write("%X/%X\n" % ((s//SEG*SEG)>>32, (s//SEG*SEG)&0xFFFFFFFF))
print(out, len(data), hex(s), hex(e))
PY
rm -rf "$tmp"
