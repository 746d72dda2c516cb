"""GetPage of a hot page against a page read from an image (issue 28, item
6 (b)).

A PostgreSQL 15 primary with default WAL settings (consistency checking
only for the rmgrs native redo lacks) has four one-row tables. After a
CHECKPOINT each row is updated, one transaction per update: the first
update of a page after a checkpoint carries its full-page image, each
later one is a heap record (HOT_UPDATE, and PRUNE as the page fills). So
the pages hold an image and then 0 (`image`), 1, 100 and 10,000 records.

Two daemons follow the primary in the same run: `bounded`, with the
default `max_record_chain` (ingest writes an image of a key once that many
records follow its last one), and `unbounded` (`max_record_chain` =
1,000,000: every read of the 10,000-update page redoes 10,000 records, as
before). Per daemon and page, one client sends GetPage at the latest LSN
serially (queue depth 1, the Python pagestream client), and each request's
latency is measured around the call: p50, p99 and the mean, beside the
image page's in the same daemon. Compaction is off, so no image layer
shortens a chain. Results go to test_output/perf/hot_page_reads.json and
a printed table. `--perf-smoke`: 200 requests per page instead of 3,000.
"""

from __future__ import annotations

import json
import platform
import statistics
import time

import pytest

from fixtures import redo_workload
from fixtures.pagestream import RelTag, parse_lsn
from fixtures.pageserver import TEST_OUTPUT
from fixtures.vanilla_pg import pg_bin_dir
from fixtures.wal_compare import follow_primary

pytestmark = pytest.mark.perf

PRIMARY_GONE = [r"replication failed: .*(Connection refused|connection closed|closed the connection|shutting down|starting up|terminating|57P0[1-3])"]
# Records after the image, per table.
PAGES = {"image": 0, "hot1": 1, "hot100": 100, "hot10000": 10_000}
CONFIGS = {"bounded": {}, "unbounded": {"max_record_chain": 1_000_000}}


def percentile(sorted_us: list[float], p: float) -> float:
    return sorted_us[min(len(sorted_us) - 1, int(len(sorted_us) * p / 100))]


def measure(ps, tenant, timeline, rel: RelTag, blk: int, n: int) -> dict:
    lat = []
    with ps.pagestream(tenant, timeline) as c:
        for _ in range(50):  # warm up: connection, caches
            c.get_page(rel, blk)
        for _ in range(n):
            t0 = time.perf_counter_ns()
            resp = c.get_page(rel, blk)
            lat.append((time.perf_counter_ns() - t0) / 1000)
            assert getattr(resp, "page", None) is not None, resp
    lat.sort()
    return {"p50_us": percentile(lat, 50), "p99_us": percentile(lat, 99), "mean_us": statistics.fmean(lat), "requests": n}


def test_hot_page_reads(pageserver_factory, vanilla_pg, request, port_distributor):
    assert pg_bin_dir(15) is not None, "PostgreSQL 15 is not installed"
    n = 200 if request.config.getoption("--perf-smoke") else 3000
    pg = vanilla_pg
    pg.init({"max_replication_slots": "4"}, checksums=True).start()
    daemons = {}
    for name, overrides in CONFIGS.items():
        ps = pageserver_factory.create(name=name, overrides={"compaction_period": "0 s", **overrides}).start()
        daemons[name] = (ps, *follow_primary(ps, pg, PRIMARY_GONE))

    with redo_workload.connect(pg) as c:
        for t in PAGES:
            c.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, n int NOT NULL)")
            c.execute(f"INSERT INTO {t} VALUES (1, 0)")
        c.execute("CHECKPOINT")
        c.execute("SET synchronous_commit = off")
        started = time.monotonic()
        for t, records in PAGES.items():
            c.execute(f"DO $$ BEGIN FOR i IN 0..{records} LOOP UPDATE {t} SET n = n + 1; COMMIT; END LOOP; END $$")
        updates_s = time.monotonic() - started
        db = c.execute("SELECT oid FROM pg_database WHERE datname = 'postgres'").fetchone()[0]
        pages = {}
        for t in PAGES:
            rel = c.execute(f"SELECT pg_relation_filenode('{t}')").fetchone()[0]
            blk = c.execute(f"SELECT (ctid::text::point)[0]::int FROM {t}").fetchone()[0]
            pages[t] = (RelTag(1663, db, rel, 0), blk)
    lsn = parse_lsn(pg.psql("SELECT pg_current_wal_insert_lsn()"))

    results: dict[str, dict] = {}
    for name, (ps, http, tenant, timeline) in daemons.items():
        deadline = time.monotonic() + 120
        while parse_lsn(http.timeline_get(tenant, timeline)["last_record_lsn"]) < lsn:
            assert time.monotonic() < deadline, f"{name}: not caught up with {lsn:X}"
            time.sleep(0.05)
        results[name] = {t: measure(ps, tenant, timeline, rel, blk, n) for t, (rel, blk) in pages.items()}
        m = http.metrics()
        results[name]["chain_images"] = m.value("pageserver_chain_images_total")
        results[name]["records_applied"] = m.histogram_buckets("pageserver_read_records_applied")

    out = {"machine": f"{platform.node()} ({platform.machine()})", "requests_per_page": n,
           "updates_seconds": updates_s, "results": results}  # fmt: skip
    (TEST_OUTPUT / "perf").mkdir(parents=True, exist_ok=True)
    (TEST_OUTPUT / "perf" / "hot_page_reads.json").write_text(json.dumps(out, indent=2, default=str))
    lines = ["| daemon | page | p50 µs | p99 µs | mean µs | p99 / image p99 |", "|---|---|---|---|---|---|"]
    for name in CONFIGS:
        base = results[name]["image"]["p99_us"]
        for t in PAGES:
            r = results[name][t]
            lines.append(f"| {name} | {t} | {r['p50_us']:.0f} | {r['p99_us']:.0f} | {r['mean_us']:.0f} | {r['p99_us'] / base:.2f} |")
    print("\n" + "\n".join(lines))
    print(f"chain images: bounded {results['bounded']['chain_images']:.0f}, unbounded {results['unbounded']['chain_images']:.0f}")
