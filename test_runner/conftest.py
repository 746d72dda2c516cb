"""pytest fixtures of the pageserver test suites (test_runner/regress and
test_runner/performance).

Every test gets its own output directory under <repo>/test_output/<test name>/
(pageserver workdirs, logs, PostgreSQL clusters), removed after a passing or
skipped test unless --keep-output is given. At teardown every pageserver the
test started is stopped gracefully (bounded) and its log is scanned: an ERROR
or WARN line that matches neither the global nor the test's allow-list fails
the test.
"""

from __future__ import annotations

import fcntl
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fixtures.basebackup import BaseBackup, scan_basebackup
from fixtures.minio import TEST_BUCKET, MinioNotInstalled, MinioServer
from fixtures.pageserver import TEST_OUTPUT, Pageserver, pageserver_testing_bin
from fixtures.utils import PortDistributor
from fixtures.vanilla_pg import PG_BIN_DIR, VanillaPostgres



def pytest_addoption(parser):
    parser.addoption("--keep-output", action="store_true", help="keep test_output/<test> of passing tests")
    parser.addoption("--perf-smoke", action="store_true", help="performance suite: a short subset only (for CI)")
    parser.addoption("--perf-runtime", default="5s", help="pagebench runtime per performance cell (default 5s)")
    parser.addoption(
        "--perf-assert-targets", action="store_true", help="fail performance tests that miss the targets of docs/benchmarks.md"
    )
    parser.addoption(
        "--majors",
        default="15,16,17,18",
        help="PostgreSQL majors of the tests parametrized by major (ids pg15..pg18) to run; "
        "the others are deselected (run-tests.sh runs the second engine pass on one major)",
    )


def pytest_collection_modifyitems(config, items):
    """`--majors`: deselect the parametrizations of other majors."""
    wanted = {f"pg{m.strip()}" for m in config.getoption("--majors").split(",") if m.strip()}
    keep, drop = [], []
    for item in items:
        spec = getattr(item, "callspec", None)
        majors = set(re.findall(r"\bpg1[5-8]\b", spec.id)) if spec is not None else set()
        (drop if majors and not majors & wanted else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_configure(config):
    config.perf_summaries = []


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    for title, text in config.perf_summaries:
        terminalreporter.write_sep("=", title)
        terminalreporter.write_line(text)


@pytest.fixture(scope="session")
def port_distributor() -> PortDistributor:
    return PortDistributor()


def _sanitize(nodeid: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid.split("::", 1)[-1])[:120]


@pytest.fixture
def test_output_dir(request) -> Path:
    d = TEST_OUTPUT / _sanitize(request.node.nodeid)
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    yield d
    reports = [getattr(request.node, f"rep_{w}", None) for w in ("setup", "call")]
    failed = any(r is not None and r.failed for r in reports)
    if not failed and not request.config.getoption("--keep-output"):
        shutil.rmtree(d, ignore_errors=True)


class PageserverFactory:
    """Creates pageservers for one test and checks them at teardown."""

    def __init__(self, output_dir: Path, ports: PortDistributor):
        self.output_dir = output_dir
        self.ports = ports
        self.instances: list[Pageserver] = []

    def create(self, name: str = "pageserver", binary: Path | None = None, **kwargs) -> Pageserver:
        ps = Pageserver(self.output_dir / name, self.ports, binary=binary, **kwargs)
        self.instances.append(ps)
        return ps

    def teardown(self) -> list[str]:
        problems = []
        for ps in self.instances:
            if ps.is_running():
                try:
                    ps.stop(timeout=30)
                except AssertionError as e:
                    problems.append(f"{ps.workdir.name}: {e}")
            for line in ps.unexpected_errors():
                problems.append(f"{ps.workdir.name} log: {line}")
        return problems


@pytest.fixture
def pageserver_factory(test_output_dir, port_distributor, request):
    factory = PageserverFactory(test_output_dir, port_distributor)
    yield factory
    problems = factory.teardown()
    if problems:
        shown = "\n".join(problems[:30])
        more = f"\n... and {len(problems) - 30} more" if len(problems) > 30 else ""
        pytest.fail(f"pageserver problems found at teardown:\n{shown}{more}", pytrace=False)


@pytest.fixture
def pageserver(pageserver_factory) -> Pageserver:
    """A started pageserver on default settings (free ports)."""
    return pageserver_factory.create().start()


@pytest.fixture
def testing_pageserver_bin() -> Path:
    b = pageserver_testing_bin()
    if b is None:
        pytest.skip(
            "failpoint test: set PAGESERVER_TESTING_BIN to a pageserver built with "
            "`cargo build --release -p pageserver --features testing --target-dir target/testing` "
            "(then PAGESERVER_TESTING_BIN=target/testing/release/pageserver)"
        )
    return b


@pytest.fixture
def vanilla_pg(test_output_dir, port_distributor):
    pg = VanillaPostgres(test_output_dir / "vanilla_pg", port_distributor.get())
    yield pg
    pg.stop(mode="immediate")
    pg.release()


@pytest.fixture
def minio(test_output_dir, port_distributor) -> MinioServer:
    """A started MinIO server with one bucket (`minio.bucket`), stopped at
    teardown. Fails (not skips) the test when MinIO is not installed."""
    server = MinioServer(test_output_dir / "minio", port_distributor)
    missing = None
    try:
        server.start()
    except MinioNotInstalled as e:
        missing = str(e)
    if missing:
        pytest.fail(missing, pytrace=False)
    try:
        server.create_bucket(TEST_BUCKET)
        server.bucket = TEST_BUCKET
        yield server
    finally:
        server.stop()


def _cached_backup(port_distributor, name: str, setup) -> BaseBackup:
    """A base backup built once and kept in test_output/_cache/<name> across
    runs (keyed by the PostgreSQL version), since building it takes a while."""
    cache = TEST_OUTPUT / "_cache" / name
    cache.parent.mkdir(parents=True, exist_ok=True)
    # Parallel pytest workers share the cache: one builds, the others wait.
    with open(cache.parent / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _cached_backup_locked(cache, port_distributor, setup)


def _cached_backup_locked(cache: Path, port_distributor, setup) -> BaseBackup:
    version = subprocess.run([str(PG_BIN_DIR / "postgres"), "--version"], capture_output=True, text=True).stdout.strip()
    marker = cache / "ready.json"
    tar = cache / "backup" / "base.tar"
    if marker.exists() and tar.exists():
        try:
            if json.loads(marker.read_text()).get("postgres") == version:
                return scan_basebackup(tar)
        except ValueError:
            pass
    if cache.exists():
        shutil.rmtree(cache)
    cache.mkdir(parents=True)
    pg = VanillaPostgres(cache / "pg", port_distributor.get())
    try:
        pg.init().start()
        setup(pg)
        pg.basebackup_tar(cache / "backup")
    finally:
        pg.stop(mode="immediate")
    pg.remove()
    marker.write_text(json.dumps({"postgres": version}))
    return scan_basebackup(tar)


@pytest.fixture(scope="session")
def pgbench_backup(port_distributor) -> BaseBackup:
    """Base backup of a cluster initialised with `pgbench -i -s 10`."""
    return _cached_backup(port_distributor, "pgbench_s10", lambda pg: pg.pgbench_init(10))


@pytest.fixture(scope="session")
def pgbench_s100_backup(port_distributor) -> BaseBackup:
    """Base backup of `pgbench -i -s 100` (1.5 GB): bigger than caches a
    benchmark can keep warm across a cache drop."""
    return _cached_backup(port_distributor, "pgbench_s100", lambda pg: pg.pgbench_init(100))


@pytest.fixture(scope="session")
def pgbench_s300_backup(port_distributor) -> BaseBackup:
    """Base backup of `pgbench -i -s 300` (4.5 GB; a 3.8 GB table in four
    segment files): the import memory benchmark's largest."""
    return _cached_backup(port_distributor, "pgbench_s300", lambda pg: pg.pgbench_init(300))


@pytest.fixture(scope="session")
def small_backup(port_distributor) -> BaseBackup:
    """Base backup of a fresh cluster with one small table, an index and a
    second database: quick to import, still every kind of file."""

    def setup(pg: VanillaPostgres):
        pg.psql("CREATE TABLE t (id int PRIMARY KEY, v text)")
        pg.psql("INSERT INTO t SELECT g, repeat('x', 100) FROM generate_series(1, 20000) g")
        pg.psql("VACUUM t")
        pg.psql("CREATE DATABASE other")
        pg.psql("CREATE TABLE u AS SELECT g FROM generate_series(1, 1000) g", dbname="other")

    return _cached_backup(port_distributor, "small", setup)
