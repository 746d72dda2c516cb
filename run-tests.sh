#!/usr/bin/env bash
# Runs every test of the project: Rust unit/integration tests (with failpoints),
# the pytest regression suite against the release daemon, and a short
# performance smoke. Prerequisites are installed by .ci/run (PostgreSQL 15,
# Python packages); on a developer machine install them once the same way.
set -euo pipefail
cd "$(dirname "$0")"

export CARGO_TERM_COLOR=never
# PostgreSQL 16 for the import tests, where .ci/run installed it.
pg16=/opt/pageserver-tests/pg16/pgserver/pginstall/bin
if [ -z "${PG16_BIN_DIR:-}" ] && [ -x "$pg16/postgres" ]; then
    export PG16_BIN_DIR="$pg16"
fi
echo "== build (release, with the testing feature: failpoints and test endpoints)"
cargo build --release --features pageserver/testing --bins

echo "== cargo test"
cargo test --workspace --features pageserver/testing

echo "== pytest: regress"
export PAGESERVER_BIN="$PWD/target/release/pageserver"
export PAGESERVER_TESTING_BIN="$PWD/target/release/pageserver"
export PAGEBENCH_BIN="$PWD/target/release/pagebench"
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
run_pytest -q test_runner/regress

echo "== pytest: performance smoke"
run_pytest -q test_runner/performance --perf-smoke
