//! `docs/openapi.yaml` against the router, both ways: the spec's (method,
//! path) pairs are exactly `http::ROUTES` (the table the router is built
//! from), each operation's `x-access` is what `auth::required_access` asks,
//! and the router serves every pair (its answer is not the 404/405 of its
//! fallbacks). Operations marked `x-testing: true` are expected only in
//! builds with the `testing` feature.
//!
//! The spec is read line by line (no YAML parser among our dependencies),
//! under the layout rules stated at its top; a line that breaks them fails
//! the test, naming it, so the scan cannot silently miss an operation.

use std::collections::BTreeMap;

use reqwest::Method;

use super::super::auth::{required_access, Access, OPENABLE_ROUTES};
use super::TestServer;

const SPEC: &str = include_str!("../../../../docs/openapi.yaml");
const HTTP_METHODS: &[&str] = &["get", "put", "post", "delete", "patch", "head", "options"];

/// One operation of the spec.
#[derive(Debug, Default)]
struct Operation {
    access: Option<String>,
    testing: bool,
    line: usize,
}

/// (METHOD, path) -> operation, from the `paths:` section.
fn spec_operations(spec: &str) -> BTreeMap<(String, String), Operation> {
    let mut ops = BTreeMap::new();
    let mut in_paths = false;
    let mut path: Option<String> = None;
    let mut op: Option<(String, String)> = None;
    for (i, line) in spec.lines().enumerate() {
        let n = i + 1;
        let indent = line.len() - line.trim_start().len();
        let text = line.trim();
        if text.is_empty() || text.starts_with('#') {
            continue;
        }
        if indent == 0 {
            in_paths = text == "paths:";
            continue;
        }
        if !in_paths {
            continue;
        }
        match indent {
            2 => {
                let key = text.strip_suffix(':').unwrap_or_else(|| {
                    panic!("openapi.yaml:{n}: a path key is `'<path>':` (block style): {text}")
                });
                let key = key.trim_matches('\'').trim_matches('"');
                assert!(key.starts_with('/'), "openapi.yaml:{n}: not a path: {text}");
                path = Some(key.to_string());
                op = None;
            }
            4 => {
                let key = text.split(':').next().unwrap_or_default();
                if HTTP_METHODS.contains(&key) {
                    assert_eq!(text, format!("{key}:"), "openapi.yaml:{n}: block style only");
                    let p = path.clone().unwrap_or_else(|| panic!("openapi.yaml:{n}: no path"));
                    let id = (key.to_uppercase(), p);
                    let old = ops.insert(id.clone(), Operation { line: n, ..Default::default() });
                    assert!(old.is_none(), "openapi.yaml:{n}: {id:?} twice");
                    op = Some(id);
                } else {
                    assert!(
                        key == "parameters" || key == "summary" || key == "description",
                        "openapi.yaml:{n}: unexpected key under a path: {text}"
                    );
                    op = None;
                }
            }
            6 => {
                let Some(id) = &op else { continue };
                let o = ops.get_mut(id).expect("inserted above");
                if let Some(v) = text.strip_prefix("x-access:") {
                    o.access = Some(v.trim().to_string());
                } else if let Some(v) = text.strip_prefix("x-testing:") {
                    o.testing = v.trim() == "true";
                }
            }
            _ => {}
        }
    }
    assert!(!ops.is_empty(), "openapi.yaml: no operations under `paths:`");
    ops
}

fn access_name(a: Access) -> &'static str {
    match a {
        Access::Open => "open",
        Access::Tenant => "tenant",
        Access::Management => "management",
    }
}

#[test]
fn openapi_spec_matches_the_router() {
    let served = super::super::route_list();
    let problems = differences(SPEC, &served, cfg!(feature = "testing"));
    assert!(problems.is_empty(), "the spec and the router differ:\n{}", problems.join("\n"));
}

/// Every way `spec` and the `served` (method, path) pairs disagree.
fn differences(spec: &str, served: &[(&str, &str)], testing_build: bool) -> Vec<String> {
    let ops = spec_operations(spec);
    let mut problems = Vec::new();
    for (method, path) in served {
        if !ops.contains_key(&(method.to_string(), path.to_string())) {
            problems.push(format!("{method} {path} is served but not in docs/openapi.yaml"));
        }
    }
    let open: Vec<String> = OPENABLE_ROUTES.iter().map(|r| r.to_string()).collect();
    for ((method, path), op) in &ops {
        let line = op.line;
        let is_served = served.iter().any(|(m, p)| m == method && p == path);
        if !is_served && (testing_build || !op.testing) {
            problems.push(format!("openapi.yaml:{line}: {method} {path} is not served"));
        }
        if op.testing != path_is_testing(path) {
            problems.push(format!("openapi.yaml:{line}: {method} {path}: x-testing is wrong"));
        }
        let Ok(m) = method.parse::<Method>() else {
            problems.push(format!("openapi.yaml:{line}: {method} is not a method"));
            continue;
        };
        let want = access_name(required_access(&m, Some(path), &open));
        if op.access.as_deref() != Some(want) {
            problems.push(format!(
                "openapi.yaml:{line}: {method} {path}: x-access {:?}, auth.rs requires {want}",
                op.access
            ));
        }
    }
    problems
}

/// The check fails in each direction: a route served but not described,
/// one described but not served, a wrong access, a wrong testing mark.
#[test]
fn differences_are_found_both_ways() {
    let spec = "paths:\n  '/v1/status':\n    get:\n      x-access: open\n  \
                '/v1/tenant':\n    get:\n      x-access: tenant\n  \
                '/v1/failpoints':\n    put:\n      x-access: management\n      x-testing: true\n";
    let served = [("GET", "/v1/status"), ("POST", "/v1/tenant")];
    let problems = differences(spec, &served, false).join("\n");
    assert!(problems.contains("POST /v1/tenant is served but not in"), "{problems}");
    assert!(problems.contains("GET /v1/tenant is not served"), "{problems}");
    assert!(
        problems.contains("x-access Some(\"tenant\"), auth.rs requires management"),
        "{problems}"
    );
    assert!(
        !problems.contains("/v1/failpoints"),
        "a testing route, not a testing build: {problems}"
    );
    let problems = differences(spec, &served, true).join("\n");
    assert!(problems.contains("PUT /v1/failpoints is not served"), "{problems}");
    let unmarked = "paths:\n  '/v1/failpoints':\n    put:\n      x-access: management\n";
    let problems = differences(unmarked, &[("PUT", "/v1/failpoints")], true).join("\n");
    assert!(problems.contains("x-testing is wrong"), "{problems}");
}

/// Whether `path` is one of the routes only `--features testing` builds serve.
fn path_is_testing(path: &str) -> bool {
    path == "/v1/failpoints" || path.contains("/testing/")
}

/// The router itself, not only its table: every operation of the spec,
/// sent with made-up ids, reaches a handler (any answer but the fallbacks').
#[tokio::test]
async fn every_spec_operation_reaches_a_handler() {
    let server = TestServer::start().await;
    let tenant = utils::id::TenantId::generate().to_string();
    let timeline = utils::id::TimelineId::generate().to_string();
    for ((method, path), op) in spec_operations(SPEC) {
        if op.testing && cfg!(not(feature = "testing")) {
            continue;
        }
        let uri = path.replace("{tenant_id}", &tenant).replace("{timeline_id}", &timeline);
        let (status, body) =
            server.call(Method::from_bytes(method.as_bytes()).unwrap(), &uri, None).await;
        let msg = body["msg"].as_str().unwrap_or_default();
        assert!(
            !msg.starts_with("no route for") && !msg.starts_with("method "),
            "{method} {path}: answered by the router's fallback: {status} {msg}"
        );
    }
}

#[test]
fn the_scan_refuses_what_it_cannot_read() {
    let flow = "paths:\n  '/v1/x': {get: {}}\n";
    assert!(std::panic::catch_unwind(|| spec_operations(flow)).is_err());
    let ok = "info:\n  title: t\npaths:\n  '/v1/x':\n    parameters: []\n    get:\n      x-access: open\n      x-testing: true\ncomponents:\n  x: 1\n";
    let ops = spec_operations(ok);
    let op = &ops[&("GET".to_string(), "/v1/x".to_string())];
    assert_eq!((op.access.as_deref(), op.testing), (Some("open"), true));
}
