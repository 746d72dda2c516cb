"""docs/grafana/pageserver.json against a real Prometheus: a pageserver with
MinIO remote storage follows a PostgreSQL 15 primary that pgbench writes to,
while pagebench reads pages from it (and a checkpoint, a forced compaction
and a GC run); Prometheus scrapes it every second. Then every PromQL
expression of the dashboard, its template variables filled in, is evaluated
over the test's time range through Prometheus's HTTP API: each must return
at least one series with a real (not NaN) sample, and every series must
carry the labels its legend shows (`{{tenant_id}}` ...), with the followed
timeline's ids where it filters by them. The template variables' own
queries (`label_values(...)`) must list the pageserver and the timeline.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fixtures.pagebench import run_pagebench
from fixtures.prometheus import PrometheusServer, prometheus_bin
from fixtures.remote import remote_pageserver
from fixtures.wal_compare import follow_primary
from test_openapi import wait_readable
from test_wal_ingest import PRIMARY_GONE, PRIMARY_SETTINGS, checkpoint_lsn, wait_for_lsn

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "pageserver.json"
LOAD_S = 8
# Grafana's $__rate_interval is at least four scrape intervals; wider here,
# so that a scrape delayed on a busy machine leaves no gap in a rate.
RATE_INTERVAL = "10s"
LEGEND_LABEL = re.compile(r"\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}")
LABEL_VALUES = re.compile(r"^label_values\((.*),\s*([a-zA-Z_]+)\)$")


def dashboard_targets(dash: dict) -> list[tuple[str, dict]]:
    """(panel title, target) of every query of every panel (rows included)."""
    out = []

    def walk(panels: list[dict]) -> None:
        for p in panels:
            out.extend((p["title"], t) for t in p.get("targets", []))
            walk(p.get("panels", []))

    walk(dash["panels"])
    return out


def fill(expr: str, values: dict[str, str]) -> str:
    for name, value in values.items():
        expr = expr.replace(f"${{{name}}}", value).replace(f"${name}", value)
    assert "$" not in expr, f"a template variable is left: {expr}"
    return expr


def test_dashboard_shape():
    """Every panel queries the datasource variable, each target has an
    expression and a legend, and panel ids are unique."""
    dash = json.loads(DASHBOARD.read_text())
    names = [v["name"] for v in dash["templating"]["list"]]
    assert names[0] == "datasource" and dash["templating"]["list"][0]["query"] == "prometheus"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    for title, t in dashboard_targets(dash):
        assert t["datasource"]["uid"] == "${datasource}", title
        assert t["expr"].strip() and t["legendFormat"].strip(), title


def start_pgbench(pg, seconds: int) -> subprocess.Popen:
    cmd = pg._cmd("pgbench", "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres", "-c", "2", "-T", str(seconds), "postgres")
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd="/")


def exercise_maintenance(http, tenant: str, timeline: str) -> None:
    """A flush, compaction with image creation, GC and a full backup: the
    compaction, GC and backup panels get samples."""
    http.timeline_checkpoint(tenant, timeline)
    http.timeline_compact(tenant, timeline, force_l0=True, force_images=True)
    http.timeline_gc(tenant, timeline)
    http.request("GET", f"/v1/tenant/{tenant}/timeline/{timeline}/fullbackup")


def check_target(prom: PrometheusServer, title: str, target: dict, values: dict, start: float, end: float) -> list[str]:
    """The problems of one dashboard query (empty: it is fine)."""
    expr = fill(target["expr"], values)
    series = prom.query_range(expr, start, end)
    what = f"{title!r} {target['refId']}: {expr}"
    if not series:
        return [f"{what}: no series"]
    problems = []
    real = [float(v) for s in series for _, v in s["values"] if not math.isnan(float(v))]
    if not real:
        problems.append(f"{what}: only NaN samples")
    for label in LEGEND_LABEL.findall(target["legendFormat"]):
        for s in series:
            if label not in s["metric"]:
                problems.append(f"{what}: a series without label {label}: {s['metric']}")
                break
    for label in ("tenant_id", "timeline_id"):
        if f"${label}" in target["expr"]:
            got = {s["metric"].get(label) for s in series}
            if got != {values[label]}:
                problems.append(f"{what}: {label} values {got}, want {{{values[label]}}}")
    return problems


def check_variables(prom: PrometheusServer, dash: dict, values: dict) -> list[str]:
    """Each `label_values(selector, label)` variable lists the expected value."""
    problems = []
    for var in dash["templating"]["list"]:
        if var["type"] != "query":
            continue
        m = LABEL_VALUES.match(var["definition"])
        assert m, f"variable {var['name']}: only label_values(...) queries are tested: {var['definition']}"
        selector, label = fill(m.group(1), values), m.group(2)
        listed = prom.api(f"label/{label}/values", **{"match[]": selector})
        if values[var["name"]] not in listed:
            problems.append(f"variable {var['name']}: {values[var['name']]} not in {listed} ({selector})")
    return problems


def test_every_dashboard_query_returns_data(pageserver_factory, minio, vanilla_pg, port_distributor, test_output_dir):
    if prometheus_bin() is None:
        pytest.fail("prometheus is not installed: run scripts/install-test-deps.sh", pytrace=False)
    dash = json.loads(DASHBOARD.read_text())
    ps = remote_pageserver(pageserver_factory, minio, "ps")
    prom = PrometheusServer(test_output_dir / "prometheus", port_distributor, [f"127.0.0.1:{ps.http_port}"]).start()
    try:
        pg = vanilla_pg.init({**PRIMARY_SETTINGS, "wal_compression": "zstd"}).start()
        pg.pgbench_init(1)
        prom.wait_scraping()
        start = time.time()
        http, tenant, timeline = follow_primary(ps, pg, PRIMARY_GONE)
        wait_readable(http, tenant, timeline)
        pgbench = start_pgbench(pg, LOAD_S)
        with ThreadPoolExecutor(1) as pool:
            reads = pool.submit(
                run_pagebench, ps, f"{LOAD_S}s", queue_depth=8, log_path=test_output_dir / "pagebench.log"
            )
            time.sleep(LOAD_S / 2)
            exercise_maintenance(http, tenant, timeline)
            bench = reads.result()
        assert bench.request_count > 0 and bench.error_count == 0, bench.total
        out, _ = pgbench.communicate(timeout=60)
        assert pgbench.returncode == 0, out
        wait_for_lsn(http, tenant, timeline, checkpoint_lsn(pg))
        prom.wait_for_samples("pageserver_wal_receiver_lag_bytes", 4)
        time.sleep(2 * prom.scrape_interval_s)  # the final state scraped too
        end = time.time()
        values = {
            "instance": f"127.0.0.1:{ps.http_port}",
            "tenant_id": tenant,
            "timeline_id": timeline,
            "__rate_interval": RATE_INTERVAL,
            "datasource": "prometheus",
        }
        problems = check_variables(prom, dash, values)
        targets = dashboard_targets(dash)
        for title, target in targets:
            problems += check_target(prom, title, target, values, start, end)
        assert not problems, f"{len(problems)} of {len(targets)} dashboard queries:\n" + "\n".join(problems)
    finally:
        prom.stop()
