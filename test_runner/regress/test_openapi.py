"""docs/openapi.yaml against a real daemon: every `x-examples` entry of the
spec is sent to a pageserver (trust auth, MinIO remote storage, a timeline
that follows a PostgreSQL 15 primary), and each answer must have the
example's status and match the response schema the spec declares for that
status (JSON Schema 2020-12, `jsonschema`). Examples run in the spec's order,
DELETE operations last, on objects of their own (`{scratch_*}`). The spec
against the router's route table: pageserver/src/http/tests/openapi.rs.

Adding a route needs no change here: its examples in the spec are sent.
"""

from __future__ import annotations

import io
import json
import os
import re
import tarfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import requests
import yaml
from jsonschema import Draft202012Validator

from fixtures.pagestream import parse_lsn
from fixtures.remote import remote_pageserver
from fixtures.utils import wait_until
from fixtures.wal_compare import follow_primary
from test_wal_ingest import PRIMARY_GONE, PRIMARY_SETTINGS

SPEC_PATH = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"
METHODS = ("get", "put", "post", "delete", "patch")
PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


def load_spec() -> dict:
    spec = yaml.safe_load(SPEC_PATH.read_text())
    assert spec["openapi"].startswith("3.1"), "JSON Schema 2020-12 schemas need OpenAPI 3.1"
    return spec


def operations(spec: dict) -> list[tuple[str, str, dict]]:
    """(METHOD, path, operation) in the spec's order."""
    return [
        (m.upper(), path, op) for path, item in spec["paths"].items() for m, op in item.items() if m in METHODS
    ]


def ordered_examples(spec: dict) -> list[tuple[str, str, dict, dict]]:
    """Every example as (METHOD, path, operation, example): DELETEs last."""
    out = [(m, p, op, ex) for m, p, op in operations(spec) for ex in op.get("x-examples", [])]
    return [e for e in out if e[0] != "DELETE"] + [e for e in out if e[0] == "DELETE"]


def fill(value: Any, values: dict[str, str]) -> Any:
    """`value` with every `{name}` placeholder of its strings replaced."""
    if isinstance(value, str):

        def one(m: re.Match) -> str:
            assert m.group(1) in values, f"unknown placeholder {m.group(0)} (known: {sorted(values)})"
            return values[m.group(1)]

        return PLACEHOLDER.sub(one, value)
    if isinstance(value, list):
        return [fill(v, values) for v in value]
    if isinstance(value, dict):
        return {k: fill(v, values) for k, v in value.items()}
    return value


def build_request(path: str, ex: dict, values: dict[str, str]) -> tuple[str, dict, dict]:
    """(path with its parameters, query, requests kwargs) of an example."""
    params = {k: str(v) for k, v in (ex.get("params") or {}).items()}
    names = PLACEHOLDER.findall(path)
    uri = path
    for name in names:
        uri = uri.replace("{" + name + "}", fill(params.pop(name, "{" + name + "}"), values))
    kwargs: dict[str, Any] = {}
    if "raw_body" in ex:
        kwargs["data"] = fill(ex["raw_body"], values).encode()
        kwargs["headers"] = {"content-type": "application/x-tar"}
    elif "body" in ex:
        kwargs["data"] = json.dumps(fill(ex["body"], values))
        kwargs["headers"] = {"content-type": "application/json"}
    return uri, fill(params, values), kwargs


def resolve(spec: dict, obj: dict) -> dict:
    ref = obj.get("$ref")
    if ref is None:
        return obj
    node: Any = spec
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return node


def check_answer(spec: dict, op: dict, resp: requests.Response, what: str) -> None:
    """The answer matches what the spec declares for its status."""
    declared = op["responses"].get(str(resp.status_code))
    assert declared is not None, f"{what}: status {resp.status_code} is not declared: {resp.text[:300]}"
    content = resolve(spec, declared).get("content", {})
    media = resp.headers.get("content-type", "").split(";")[0].strip()
    assert media in content, f"{what}: content-type {media!r}, the spec declares {sorted(content)}"
    if media == "application/json":
        schema = {**content[media]["schema"], "components": spec["components"]}
        errors = sorted(Draft202012Validator(schema).iter_errors(resp.json()), key=lambda e: list(e.path))
        assert not errors, f"{what}: the answer does not match the schema:\n" + "\n".join(
            f"  at {list(e.path)}: {e.message[:300]}" for e in errors[:10]
        )
    elif media == "application/x-tar":
        with tarfile.open(fileobj=io.BytesIO(resp.content)) as tar:
            assert "PG_VERSION" in tar.getnames(), f"{what}: the archive has no PG_VERSION"
    elif media == "text/plain":
        assert "# TYPE pageserver_" in resp.text, f"{what}: not Prometheus text"


def wait_readable(http, tenant: str, timeline: str) -> dict:
    """Until a followed timeline has ingested up to its backup's end (reads
    below `wal_source.consistent_lsn` are refused); its detail then."""

    def readable() -> dict:
        info = http.timeline_get(tenant, timeline)
        assert parse_lsn(info["last_record_lsn"]) >= parse_lsn(info["wal_source"]["consistent_lsn"]), info
        return info

    return wait_until(readable, timeout=60, what="the followed timeline readable")


def test_spec_is_well_formed():
    """Schemas are valid JSON Schema, every operation has examples with a
    declared status, access and a summary, and every `$ref` resolves."""
    spec = load_spec()
    for name, schema in spec["components"]["schemas"].items():
        Draft202012Validator.check_schema(schema)
    refs = re.findall(r"\$ref: '([^']+)'", SPEC_PATH.read_text())
    for ref in set(refs):
        resolve(spec, {"$ref": ref})
    schemes = spec["components"]["securitySchemes"]
    for requirement in spec["security"]:
        assert set(requirement) <= set(schemes), f"unknown security scheme in {requirement}"
    seen_ids = set()
    for method, path, op in operations(spec):
        what = f"{method} {path}"
        assert op.get("x-access") in ("open", "tenant", "management"), what
        assert op.get("summary") and op.get("operationId"), what
        assert op["operationId"] not in seen_ids, f"{what}: operationId twice"
        seen_ids.add(op["operationId"])
        assert op.get("x-examples"), f"{what}: no x-examples"
        for ex in op["x-examples"]:
            assert str(ex["status"]) in op["responses"], f"{what}: {ex['summary']}: status not declared"
        for status, r in op["responses"].items():
            assert "content" in resolve(spec, r) or status == "204", f"{what} {status}: no content"


def test_every_example_against_a_daemon(pageserver_factory, minio, vanilla_pg, testing_pageserver_bin):
    spec = load_spec()
    ps = remote_pageserver(pageserver_factory, minio, "ps", binary=testing_pageserver_bin)
    pg = vanilla_pg.init({**PRIMARY_SETTINGS, "wal_compression": "zstd"}).start()
    http, tenant, timeline = follow_primary(ps, pg, PRIMARY_GONE)
    wait_readable(http, tenant, timeline)
    scratch_timeline = http._json(
        "POST", f"/v1/tenant/{tenant}/timeline", json={"pg_version": 15, "initial_lsn": "0/0"}
    )["timeline_id"]
    values = {
        "tenant_id": tenant,
        "timeline_id": timeline,
        "last_record_lsn": http.timeline_get(tenant, timeline)["last_record_lsn"],
        "connstring": f"postgres://postgres@127.0.0.1:{pg.port}/postgres",
        "scratch_tenant_id": http.tenant_create(),
        "scratch_timeline_id": scratch_timeline,
        "io_engine": http.io_engine()["io_engine"],
    }
    sent: set[tuple[str, str]] = set()
    failures = []
    for method, path, op, ex in ordered_examples(spec):
        values |= {
            "new_tenant_id": os.urandom(16).hex(),
            "new_timeline_id": os.urandom(16).hex(),
            "now": datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        }
        uri, query, kwargs = build_request(path, ex, values)
        what = f"{method} {uri} ({ex['summary']})"
        resp = requests.request(method, ps.http_endpoint + uri, params=query, timeout=60, **kwargs)
        sent.add((method, path))
        try:
            assert resp.status_code == ex["status"], f"{what}: status {resp.status_code}, want {ex['status']}: {resp.text[:300]}"
            check_answer(spec, op, resp, what)
        except AssertionError as e:
            failures.append(str(e))
    assert not failures, f"{len(failures)} examples failed:\n" + "\n".join(failures)
    missing = {(m, p) for m, p, _ in operations(spec)} - sent
    assert not missing, f"operations without an example sent: {sorted(missing)}"
