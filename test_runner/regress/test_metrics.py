"""/metrics: every documented metric is exported from the first scrape, and
the page service metrics move as requests are served."""

from __future__ import annotations

import re

from fixtures.compare import import_backup
from fixtures.metrics import parse_metrics
from fixtures.pageserver import REPO_ROOT
from fixtures.pagestream import GetPageResponse

# Neon's names, which dashboards and Neon's tests rely on (issue: page service).
REQUIRED_METRICS = [
    "pageserver_smgr_query_seconds",
    "pageserver_smgr_query_started_count",
    "pageserver_get_vectored_seconds",
    "pageserver_page_service_batch_size",
    "pageserver_page_service_batch_break_reason_total",
    "pageserver_page_service_pagestream_batch_wait_time_seconds",
    "pageserver_page_service_config_max_batch_size",
    "pageserver_wait_lsn_seconds",
    "libmetrics_process_cpu_seconds_highres",
]

SMGR_QUERY_TYPES = ["get_rel_exists", "get_rel_size", "get_page_at_lsn", "get_db_size", "get_slru_segment"]


def documented_metrics() -> list[str]:
    """Metric names written in backticks in docs/metrics.md."""
    doc = REPO_ROOT / "docs" / "metrics.md"
    if not doc.exists():
        return []
    names = re.findall(r"`((?:pageserver|libmetrics)_[a-z0-9_]+)`", doc.read_text())
    # A histogram may be documented with its sample suffixes.
    return sorted({re.sub(r"_(bucket|sum|count)$", "", n) if not n.endswith("_started_count") else n for n in names})


def per_timeline_metrics() -> set[str]:
    """Documented metrics labelled by `timeline_id`: they have series only
    while such a timeline exists (test_wal_ingest.py and
    test_remote_storage.py check them)."""
    doc = REPO_ROOT / "docs" / "metrics.md"
    rows = [line for line in doc.read_text().splitlines() if line.startswith("| `") and "`timeline_id`" in line]
    return {re.findall(r"`([a-z0-9_]+)`", line)[0] for line in rows}


def test_every_documented_metric_at_first_scrape(pageserver):
    text = pageserver.http_client().metrics_text()
    m = parse_metrics(text)  # also checks the exposition format
    families = m.families()
    expected = sorted((set(REQUIRED_METRICS) | set(documented_metrics())) - per_timeline_metrics())
    # The table parser found the per-timeline rows (not an empty set that would
    # silently exempt nothing).
    assert "pageserver_wal_receiver_lag_bytes" in per_timeline_metrics(), per_timeline_metrics()
    missing = [n for n in expected if n not in families]
    assert not missing, f"missing from the first /metrics scrape: {missing}"
    for qt in SMGR_QUERY_TYPES:
        assert m.query("pageserver_smgr_query_seconds_count", smgr_query_type=qt), f"no smgr series for {qt}"
    assert m.query("pageserver_get_vectored_seconds_count", task_kind="PageRequestHandler")
    assert m.types.get("pageserver_page_service_batch_size") == "histogram"
    les = [le for le, _ in m.histogram_buckets("pageserver_page_service_batch_size")]
    for b in (1, 2, 4, 8, 16, 32):
        assert float(b) in les, f"batch size histogram lacks bucket le={b}: {les}"


def test_page_service_metrics_move(pageserver, small_backup):
    tl = import_backup(pageserver, small_backup)
    rel = max(small_backup.relations, key=small_backup.nblocks)
    http = pageserver.http_client()
    before = http.metrics()
    n = 3000  # enough work for the CPU gauge (clock-tick resolution) to move
    with pageserver.pagestream(tl.tenant_id, tl.timeline_id) as c:
        pages = [(rel, i % small_backup.nblocks(rel)) for i in range(n)]
        for _, resp in c.get_pages_pipelined(pages, depth=32):
            assert isinstance(resp, GetPageResponse)
        c.nblocks(rel)
        c.exists(rel)
        c.db_size(rel.dbnode)
        c.slru_segment(0, 0)
        during = http.metrics()
        live = [s for s in during.samples if "connection" in s.name and s.value >= 1]
        assert live, "no live-connection metric counts the open connection"
    after = http.metrics()

    def delta(name, **labels):
        return after.value_or(name, 0.0, **labels) - before.value_or(name, 0.0, **labels)

    assert delta("pageserver_smgr_query_seconds_count", smgr_query_type="get_page_at_lsn") == n
    assert delta("pageserver_smgr_query_started_count", smgr_query_type="get_page_at_lsn") == n
    for qt in ("get_rel_size", "get_rel_exists", "get_db_size", "get_slru_segment"):
        assert delta("pageserver_smgr_query_seconds_count", smgr_query_type=qt) >= 1, qt
    vectored = delta("pageserver_get_vectored_seconds_count", task_kind="PageRequestHandler")
    assert 1 <= vectored <= n
    batches = delta("pageserver_page_service_batch_size_count")
    batched_pages = delta("pageserver_page_service_batch_size_sum")
    assert batches >= 1 and n <= batched_pages <= n + 4, (batches, batched_pages)
    assert delta("libmetrics_process_cpu_seconds_highres") > 0
