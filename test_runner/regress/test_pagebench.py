"""pagebench get-page-latest-lsn against a real pageserver: report shape,
exact request accounting against the server's own metrics, both protocol
versions, rate limiting, and errors counted (not panics) when the server dies."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from fixtures.compare import compare_all, import_backup
from fixtures.pagebench import run_pagebench
from fixtures.pageserver import pagebench_bin

GETPAGE = {"smgr_query_type": "get_page_at_lsn"}


@pytest.fixture
def imported(pageserver, small_backup):
    return import_backup(pageserver, small_backup)


def getpage_count(ps) -> float:
    return ps.http_client().metrics().value_or("pageserver_smgr_query_seconds_count", 0.0, **GETPAGE)


@pytest.mark.parametrize("protocol", ["v2", "v3"])
def test_report_and_exact_accounting(pageserver, imported, protocol, test_output_dir):
    before = getpage_count(pageserver)
    res = run_pagebench(
        pageserver, runtime="2s", queue_depth=8, extra_args=["--protocol", protocol], log_path=test_output_dir / "pagebench.log"
    )
    t = res.total
    for key in ("request_count", "error_count", "rps", "latency_mean", "latency_mean_us", "latency_percentiles"):
        assert key in t, key
    for p in ("p50", "p95", "p99", "p99.9", "p99.99"):
        assert isinstance(t["latency_percentiles"][p], str)
        assert t["latency_percentiles_us"][p] > 0
    assert res.error_count == 0, t
    assert res.request_count > 100
    assert abs(res.rps - res.request_count / t["runtime_seconds"]) < 1e-6 * res.rps + 1e-9
    p = t["latency_percentiles_us"]
    assert p["p50"] <= p["p95"] <= p["p99"] <= p["p99.9"] <= p["p99.99"]
    # Every request pagebench counted was served exactly once, and no more.
    assert getpage_count(pageserver) - before == res.request_count
    assert "req/s" in res.stderr, "no progress line on stderr"


def test_explicit_targets_and_clients(pageserver, small_backup, imported):
    other = import_backup(pageserver, small_backup)
    res = run_pagebench(
        pageserver,
        runtime="2s",
        num_clients=2,
        queue_depth=2,
        targets=[f"{imported.tenant_id}/{imported.timeline_id}", f"{other.tenant_id}/{other.timeline_id}"],
        extra_args=["--req-latest-probability", "0.5"],
    )
    assert res.error_count == 0 and res.request_count > 100


def test_rate_limit(pageserver, imported):
    res = run_pagebench(pageserver, runtime="3s", extra_args=["--per-client-rate", "100"])
    assert res.error_count == 0
    assert 240 <= res.request_count <= 320, res.request_count


def test_errors_counted_when_server_dies(pageserver, imported, test_output_dir):
    cmd = [
        str(pagebench_bin()), "get-page-latest-lsn",
        "--mgmt-api-endpoint", pageserver.http_endpoint,
        "--page-service-connstring", pageserver.connstring,
        "--runtime", "8s", "--queue-depth", "4",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(2)
    pageserver.kill()
    time.sleep(1)
    pageserver.start()
    out, err = proc.communicate(timeout=60)
    (test_output_dir / "pagebench.log").write_text(err + out)
    assert proc.returncode == 0, err
    assert "panicked" not in err
    t = json.loads(out)["total"]
    assert t["error_count"] > 0, t
    assert t["errors"]["connection_errors"] + t["errors"]["connect_failures"] == t["error_count"]
    # It reconnected: requests were served after the restart too.
    after_restart = pageserver.http_client().metrics().value_or("pageserver_smgr_query_seconds_count", 0.0, **GETPAGE)
    assert after_restart > 0


def test_no_timelines_is_a_clear_error(pageserver):
    res = subprocess.run(
        [str(pagebench_bin()), "get-page-latest-lsn", "--mgmt-api-endpoint", pageserver.http_endpoint, "--runtime", "1s"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode != 0
    assert "no timelines" in res.stderr


def test_ctrl_c_prints_report(pageserver, imported):
    """Without --runtime it runs until SIGINT, then drains and reports."""
    import signal

    proc = subprocess.Popen(
        [str(pagebench_bin()), "get-page-latest-lsn", "--mgmt-api-endpoint", pageserver.http_endpoint,
         "--page-service-connstring", pageserver.connstring, "--queue-depth", "4"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    time.sleep(2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    t = json.loads(out)["total"]
    assert t["request_count"] > 0 and t["error_count"] == 0, t


def test_served_without_connection_threads(pageserver, small_backup):
    """`page_service_threads = 0`: connections are tasks of the daemon's own
    runtime (no `page-service-<i>` threads), in both execution modes, and
    every page is served unchanged."""
    pageserver.stop()
    pipelining = {"mode": "pipelined", "max_batch_size": 32, "execution": "tasks"}
    pageserver.start(extra_overrides={"page_service_threads": 0, "page_service_pipelining": pipelining})
    tl = import_backup(pageserver, small_backup)
    compare_all(pageserver, tl, small_backup)
    before = getpage_count(pageserver)
    res = run_pagebench(pageserver, runtime="2s", queue_depth=8)
    assert res.error_count == 0 and res.request_count > 100, res.total
    assert getpage_count(pageserver) - before == res.request_count
    names = [p.read_text().strip() for p in Path(f"/proc/{pageserver.proc.pid}/task").glob("*/comm")]
    assert not [n for n in names if n.startswith("page-service-")], names
