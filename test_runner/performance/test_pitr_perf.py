"""Point-in-time restore by timestamp against PostgreSQL's own PITR (issue
31, item 6).

One PostgreSQL 18 primary (data checksums, default WAL settings; 18 because
it is the newest major the daemon follows and its build here has the client
programs, `pg_basebackup`, `pg_receivewal` and `pg_waldump`, which the
build of 17 lacks), `pgbench -i -s PITR_SCALE`. At the start, one after the
other: `pg_receivewal` into an archive from a slot of its own, a timed
`pg_basebackup -Ft -X none --checkpoint=fast` (MiB/s), and the daemon
following the primary. pgbench writes for PITR_SECONDS; the target moment
is half of that back from the end, chosen between commits
(fixtures/pitr.py: every commit record before it in WAL is older, every one
after it newer, so both tools must stop at the same LSN).

Two restores of the same moment, each timed from its first command until a
PostgreSQL answers `pg_is_in_recovery() = false` (a read-write server at
the moment, ready for use):

- ours: `pagectl restore --time T` (get_lsn_by_timestamp, the fullbackup
  stream, fsync of every file), the `pg_ctl` command it prints, the query;
- PostgreSQL's: `tar -xf` of the base backup, `recovery.signal` with
  `recovery_target_time = T`, `restore_command` copying from the archive,
  `recovery_target_action = promote`, `pg_ctl start`, the query. The
  moment its log says `recovery stopping before` (the target reached;
  what `pause` would give a read-only query) is reported too.

Both restored servers run with fsync = on (the primary runs with the
test fixtures' fsync = off). The checks that pin the moment must give the
same answers on both: count, max(mtime), sum(delta) of pgbench_history,
the balance sums of the three other tables (each equal to sum(delta)),
max(mtime) <= T; of the transactions around T that pg_waldump lists, those
committed at or before T have their pgbench_history row and none after T
has.

The test asserts correctness; the times are the benchmark's output
(docs/benchmarks.md; target: ours >= 5x faster). With --perf-smoke: scale 1,
10 s of pgbench (the correctness check of a timestamp restore against
PostgreSQL's own PITR).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

import psycopg
import pytest
import requests

from fixtures.pageserver import pagectl_bin
from fixtures.pagestream import parse_lsn
from fixtures.pitr import Target, WalArchive, commits, pick_target, recover, wait_read_write
from fixtures.utils import fmt_lsn
from fixtures.vanilla_pg import VanillaPostgres, _as_postgres, pg_bin_dir
from fixtures.wal_bench import current_lsn, parse_pgbench, pgbench_popen, record, wait_for_lsn
from fixtures.wal_compare import follow_primary

# The full run takes PITR_SECONDS of pgbench and about 5 minutes more.
pytestmark = [pytest.mark.perf, pytest.mark.timeout(int(os.environ.get("PITR_SECONDS", "600")) + 1200)]

MAJOR = 18
MIB = 2**20
PRIMARY_GONE = [r"replication failed: .*(Connection refused|connection closed|closed the connection|shutting down|terminating|57P0[1-3])"]
# Settings of both restored servers beside their port and socket.
RESTORED_CONF = {"listen_addresses": "'127.0.0.1'", "fsync": "on"}
# Another pagectl binary (e.g. a build before a change) restoring the same
# moment first, timed the same way: an A/B in one run.
BASELINE_PAGECTL = os.environ.get("PITR_BASELINE_PAGECTL")
# `perf record -g` of the daemon during the fullbackup read to /dev/null
# into this file, if set.
PERF_DATA = os.environ.get("PITR_PERF_DATA")
# Seconds of WAL on each side of the middle of the run searched for a gap.
WINDOW_S = 3.0


def params(request) -> tuple[int, int]:
    if request.config.getoption("--perf-smoke"):
        return 1, 10
    return int(os.environ.get("PITR_SCALE", "50")), int(os.environ.get("PITR_SECONDS", "600"))


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def test_pitr_beside_postgresql(pageserver, test_output_dir, port_distributor, request):
    scale, seconds = params(request)
    load_before = uptime()
    pg = VanillaPostgres(test_output_dir / "primary", port_distributor.get(), bin_dir=pg_bin_dir(MAJOR))
    pg.init({"max_replication_slots": "4"}, checksums=True).start()
    ps, nodes, tenant = pageserver, [], None
    try:
        pg.pgbench_init(scale)
        archive = WalArchive(pg, pg.root / "archive")
        backup = timed_basebackup(pg, pg.root / "basebackup")
        http, tenant, tl = follow_primary(ps, pg, PRIMARY_GONE)
        wait_for_lsn(http, tenant, tl, current_lsn(pg), timeout=600)
        run, samples = pgbench_sampled(pg, seconds)
        end_lsn = current_lsn(pg)
        wait_for_lsn(http, tenant, tl, end_lsn, timeout=600)
        archived_to = archive.finish()
        target = choose_target(pg, archive.dir, samples, seconds)

        baseline = None
        if BASELINE_PAGECTL:
            base_node = fresh_node(test_output_dir / "baseline", port_distributor.get())
            nodes.append(base_node)
            baseline = restore_ours(ps, tenant, tl, target, base_node, binary=BASELINE_PAGECTL)
        ours_node = fresh_node(test_output_dir / "ours", port_distributor.get())
        nodes.append(ours_node)
        ours = restore_ours(ps, tenant, tl, target, ours_node)
        theirs_node = fresh_node(test_output_dir / "theirs", port_distributor.get())
        nodes.append(theirs_node)
        os.sync()
        wall0 = time.time()
        theirs = recover(theirs_node, backup["tar"], archive.dir, target, node_conf(theirs_node))
        theirs["target_reached"] = target_reached_s(theirs_node, target, wall0)

        tz = pg.psql("SHOW timezone")
        ours_answers, theirs_answers = answers(ours_node, target, tz), answers(theirs_node, target, tz)
        assert ours_answers == theirs_answers, (ours_answers, theirs_answers)
        if baseline is not None:
            assert answers(base_node, target, tz) == ours_answers
        check_moment(pg, ours_node, theirs_node, target)
        ours["fullbackup_to_null_s"] = fullbackup_to_null(ps, tenant, tl, ours["lsn"])
        result = summarize(scale, seconds, run, backup, ours, theirs, target, archive, archived_to)
        result.update(answers=ours_answers, load_before=load_before, load_after=uptime())
        if baseline is not None:
            result["baseline"] = {"pagectl": BASELINE_PAGECTL, **{k: baseline[k] for k in ("pagectl", "stream", "start", "promoted")}}
        record(request, "pitr", "PITR: pagectl restore --time beside PostgreSQL's recovery_target_time", result)
        request.config.perf_summaries.append(("PITR summary", table(result)))
    finally:
        for n in nodes:
            n.stop(mode="immediate")
            n.release()
        if tenant is not None:
            ps.http_client().tenant_delete(tenant)  # before the primary stops
        pg.stop(mode="immediate")
        pg.release()


def timed_basebackup(pg: VanillaPostgres, dest: Path) -> dict:
    """`pg_basebackup -Ft -X none --checkpoint=fast` (synced, as by default)
    into `dest`: its tar, seconds, bytes and the backup's start LSN."""
    pg.mkdir(dest)
    t0 = time.monotonic()
    pg.run(
        "pg_basebackup", "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres", "-D", str(dest),
        "-Ft", "-X", "none", "--checkpoint=fast", timeout=3600,
    )  # fmt: skip
    secs = time.monotonic() - t0
    tar = dest / "base.tar"
    size = sum(f.stat().st_size for f in dest.iterdir())
    label = subprocess.run(["tar", "-xOf", str(tar), "--occurrence=1", "backup_label"], capture_output=True, text=True, check=True).stdout
    start = re.search(r"START WAL LOCATION: ([0-9A-F]+/[0-9A-F]+)", label).group(1)
    return {"tar": tar, "seconds": secs, "bytes": size, "start_lsn": parse_lsn(start)}


def pgbench_sampled(pg: VanillaPostgres, seconds: int) -> tuple:
    """pgbench for `seconds` (4 clients, 2 threads), the primary's insert
    LSN sampled every 0.25 s: (run, [(unix time, lsn)])."""
    bench = pgbench_popen(pg, seconds)
    samples = []
    with psycopg.connect(f"host=127.0.0.1 port={pg.port} user=postgres dbname=postgres", autocommit=True) as conn:
        while bench.poll() is None:
            lsn = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()[0]
            samples.append((time.time(), parse_lsn(lsn)))
            time.sleep(0.25)
    out = bench.stdout.read()
    assert bench.returncode == 0, out
    return parse_pgbench(out), samples


def choose_target(pg: VanillaPostgres, wal_dir: Path, samples: list, seconds: int) -> Target:
    """The moment half the run back from its end, moved into the nearest
    gap between commits (fixtures/pitr.py) within WINDOW_S of it."""
    end = samples[-1][0]
    middle = end - seconds / 2
    lo = max(lsn for t, lsn in samples if t <= middle - WINDOW_S) if samples[0][0] <= middle - WINDOW_S else samples[0][1]
    hi = min((lsn for t, lsn in samples if t >= middle + WINDOW_S), default=samples[-1][1])
    recs = commits(pg, wal_dir, lo, hi)
    return pick_target(recs, datetime.fromtimestamp(middle, timezone.utc))


def fresh_node(root: Path, port: int) -> VanillaPostgres:
    """A cluster of MAJOR to be written by a restore (not initialised)."""
    node = VanillaPostgres(root, port, bin_dir=pg_bin_dir(MAJOR))
    node.mkdir(node.root)
    node.mkdir(node.sockdir)
    return node


def node_conf(node: VanillaPostgres) -> dict[str, str]:
    return {"port": str(node.port), "unix_socket_directories": f"'{node.sockdir}'", **RESTORED_CONF}


def restore_ours(ps, tenant: str, tl: str, target: Target, node: VanillaPostgres, binary: str | None = None) -> dict:
    """`pagectl restore --time` (PAGECTL_BIN, or `binary`), then the
    `pg_ctl` command it prints (its output to a log file, as a shell user
    would redirect it), then the first query. Seconds of each step, the
    bytes streamed, the LSN."""
    args = [
        "restore", "--pageserver", f"http://127.0.0.1:{ps.http_port}", "--tenant", tenant, "--timeline", tl,
        "--time", target.rfc3339(), "--pgdata", str(node.datadir), "--port", str(node.port),
        "--pg-bin-dir", str(node.bin_dir),
    ]  # fmt: skip
    cmd = [str(binary or pagectl_bin()), *args]
    if _as_postgres():
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    os.sync()  # no earlier writes left for this restore's fsyncs to wait for
    t0 = time.monotonic()
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, cwd="/")
    pagectl_s = time.monotonic() - t0
    assert res.returncode == 0, f"pagectl exited {res.returncode}:\n{res.stdout}\n{res.stderr}"
    with open(node.datadir / "postgresql.conf", "a") as f:
        for k, v in node_conf(node).items():
            f.write(f"{k} = {v}\n")
    command = re.search(r"^start it with: (.*)$", res.stdout, re.M).group(1)
    cmd = shlex.split(command)
    if _as_postgres():
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    with open(node.root / "pg_ctl.log", "w") as log:
        subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=True, timeout=600, cwd="/")
    node.running = True
    started_s = time.monotonic() - t0
    wait_read_write(node)
    total_s = time.monotonic() - t0
    streamed = re.search(r"^restored: ([\d.]+) MiB, (\d+) pages, [\d.]+ MiB/s, ([\d.]+) s", res.stderr, re.M)
    lsn = re.search(r"^restoring \S+ at ([0-9A-F]+/[0-9A-F]+)", res.stderr, re.M).group(1)
    return {
        "pagectl": pagectl_s,
        "stream": float(streamed.group(3)),
        "mib": float(streamed.group(1)),
        "pages": int(streamed.group(2)),
        "start": started_s,
        "promoted": total_s,
        "lsn": lsn,
        "command": command,
    }


def target_reached_s(node: VanillaPostgres, target: Target, wall0: float) -> float | None:
    """Seconds from `wall0` (unix time) to the log line `recovery stopping
    before commit of transaction X`, which must name the first transaction
    after the target; None if the log's time zone is not UTC."""
    log = (node.logfile).read_text()
    m = re.search(
        r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) (\S+) .*recovery stopping before (?:commit|abort) of transaction (\d+)",
        log,
        re.M,
    )
    assert m, f"no 'recovery stopping before' in {node.logfile}"
    assert int(m.group(3)) == target.first_out.xid, (m.group(0), target.first_out)
    if m.group(2) not in ("UTC", "GMT"):
        return None
    at = datetime.fromisoformat(m.group(1)).replace(tzinfo=timezone.utc).timestamp()
    return at - wall0


def query(node: VanillaPostgres, sql: str, *args) -> list[tuple]:
    with psycopg.connect(f"host=127.0.0.1 port={node.port} user=postgres dbname=postgres") as conn:
        return conn.execute(sql, args or None).fetchall()


def answers(node: VanillaPostgres, target: Target, tz: str) -> dict:
    """The checks that pin the moment (must be equal on both restores)."""
    n, max_mtime, deltas = query(node, "SELECT count(*), max(mtime), sum(delta) FROM pgbench_history")[0]
    sums = query(
        node,
        "SELECT (SELECT sum(abalance) FROM pgbench_accounts), (SELECT sum(bbalance) FROM pgbench_branches), "
        "(SELECT sum(tbalance) FROM pgbench_tellers)",
    )[0]
    assert all(s == deltas for s in sums), f"balance sums {sums}, sum(delta) {deltas}"
    # mtime is a timestamp without time zone, in the primary's TimeZone.
    [(before,)] = query(node, "SELECT %s::timestamp <= (%s::timestamptz AT TIME ZONE %s)", max_mtime, target.sql(), tz)
    assert before, f"a row of {max_mtime} ({tz}), after {target.rfc3339()}"
    return {"history_rows": n, "max_mtime": str(max_mtime), "sum_delta": deltas}


def history_xids(node: VanillaPostgres, xids: list[int]) -> set[int]:
    """Which of `xids` inserted a pgbench_history row."""
    rows = query(node, "SELECT xmin::text::bigint FROM pgbench_history WHERE xmin::text::bigint = ANY(%s)", xids)
    return {r[0] for r in rows}


def check_moment(primary, ours: VanillaPostgres, theirs: VanillaPostgres, target: Target) -> None:
    """Of the transactions around T, those committed at or before it that
    inserted a history row (the primary has the rows of all) have it on
    both restores, and none committed after T has."""
    window = [c.xid for c in target.before + target.after]
    expected = history_xids(primary, [c.xid for c in target.before if not c.abort])
    assert expected, "no pgbench transaction among the commits before the target"
    assert target.first_out.xid not in expected
    for node in (ours, theirs):
        got = history_xids(node, window)
        assert got == expected, (node.root.name, sorted(got - expected)[:10], sorted(expected - got)[:10])


def fullbackup_to_null(ps, tenant: str, tl: str, lsn: str) -> float:
    """Seconds of the HTTP fullbackup at `lsn` read and discarded (the
    daemon and HTTP without pagectl's writes): where a restore's time goes."""
    profiler = None
    if PERF_DATA:  # `perf record -g` of the daemon while it streams
        profiler = subprocess.Popen(
            ["perf", "record", "-g", "-F", "499", "-p", str(ps.proc.pid), "-o", PERF_DATA],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(1)
    t0 = time.monotonic()
    url = f"http://127.0.0.1:{ps.http_port}/v1/tenant/{tenant}/timeline/{tl}/fullbackup?lsn={lsn}"
    with requests.get(url, stream=True, timeout=600) as resp:
        resp.raise_for_status()
        for _ in resp.iter_content(chunk_size=1 << 20):
            pass
    secs = time.monotonic() - t0
    if profiler is not None:
        profiler.send_signal(signal.SIGINT)
        profiler.wait(timeout=120)
    return secs


def summarize(scale, seconds, run, backup, ours, theirs, target, archive, archived_to) -> dict:
    replayed = target.first_out.lsn - backup["start_lsn"]
    r = lambda v: None if v is None else round(v, 2)  # noqa: E731
    return {
        "major": MAJOR,
        "scale": scale,
        "pgbench_seconds": seconds,
        "pgbench_tps": run.tps,
        "target": target.rfc3339(),
        "target_lsn": ours["lsn"],
        "first_after_target": {"xid": target.first_out.xid, "time": str(target.first_out.time)},
        "pg_basebackup_s": r(backup["seconds"]),
        "pg_basebackup_mib": r(backup["bytes"] / MIB),
        "pg_basebackup_mib_s": r(backup["bytes"] / MIB / backup["seconds"]),
        "archive_mib": r(archive.bytes() / MIB),
        "archived_to": fmt_lsn(archived_to),
        "wal_replayed_mib": r(replayed / MIB),
        "ours_s": r(ours["promoted"]),
        "ours_pagectl_s": r(ours["pagectl"]),
        "ours_stream_s": r(ours["stream"]),
        "ours_pg_ctl_s": r(ours["start"] - ours["pagectl"]),
        "ours_restore_mib": r(ours["mib"]),
        "ours_restore_mib_s": r(ours["mib"] / ours["pagectl"]),
        "ours_stream_mib_s": r(ours["mib"] / ours["stream"]),
        "fullbackup_to_null_s": r(ours["fullbackup_to_null_s"]),
        "theirs_s": r(theirs["promoted"]),
        "theirs_extract_s": r(theirs["extract"]),
        "theirs_pg_ctl_s": r(theirs["start"] - theirs["extract"]),
        "theirs_target_reached_s": r(theirs["target_reached"]),
        "ratio": r(theirs["promoted"] / ours["promoted"]),
        "ratio_to_target_reached": r(theirs["target_reached"] / ours["promoted"]) if theirs["target_reached"] else None,
        "command": ours["command"],
    }


def table(res: dict) -> str:
    rows = [
        ("scale / pgbench", f"{res['scale']} / {res['pgbench_seconds']} s at {res['pgbench_tps']:.0f} tps"),
        ("target", f"{res['target']} ({res['target_lsn']})"),
        ("pg_basebackup", f"{res['pg_basebackup_mib']} MiB in {res['pg_basebackup_s']} s: {res['pg_basebackup_mib_s']} MiB/s"),
        ("pagectl restore", f"{res['ours_restore_mib']} MiB in {res['ours_pagectl_s']} s: {res['ours_restore_mib_s']} MiB/s "
                            f"(stream {res['ours_stream_s']} s; fullbackup to /dev/null {res['fullbackup_to_null_s']} s)"),
        ("pageserver: to a read-write server", f"{res['ours_s']} s (pg_ctl {res['ours_pg_ctl_s']} s)"),
        ("PostgreSQL: to a read-write server", f"{res['theirs_s']} s (tar {res['theirs_extract_s']} s, "
                                              f"target reached at {res['theirs_target_reached_s']} s)"),
        ("WAL replayed by PostgreSQL", f"{res['wal_replayed_mib']} MiB"),
        ("ratio (PostgreSQL / pageserver)", f"{res['ratio']}x (to the target reached: {res['ratio_to_target_reached']}x; target >= 5x)"),
        ("load", f"before: {res['load_before']}; after: {res['load_after']}"),
    ]  # fmt: skip
    if b := res.get("baseline"):
        rows.insert(5, ("baseline pagectl: to a read-write server",
                        f"{b['promoted']:.2f} s (pagectl {b['pagectl']:.2f} s, stream {b['stream']:.2f} s)"))  # fmt: skip
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
