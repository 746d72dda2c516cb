//! The HTTP client of the pageserver's management API (`docs/http-api.md`).
//!
//! Blocking (reqwest): one request at a time. API calls time out after
//! `--timeout`; a `fullbackup` body has no overall timeout (it is as long as
//! the database), only a connect timeout. A refusal is an error naming the
//! method, the path, the status and the daemon's `{"msg": ...}`.

use std::time::Duration;

use anyhow::{anyhow, Context};
use clap::Args;
use reqwest::blocking::{Client, RequestBuilder, Response};
use reqwest::Method;
use serde_json::Value;

/// The environment variable read for the JWT when `--jwt` is not given.
const JWT_ENV: &str = "PAGECTL_JWT";
/// Connect timeout of every request.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the pageserver is, and how to authenticate.
#[derive(Args, Clone, Debug)]
pub struct Conn {
    /// The pageserver's HTTP API (`listen_http_addr`).
    #[arg(long, default_value = "http://127.0.0.1:9898")]
    pub pageserver: String,
    /// A JWT to send as `Authorization: Bearer` (when the daemon has
    /// `http_auth_type = "jwt"`). Default: the environment variable
    /// PAGECTL_JWT (better than the command line, which others can see).
    #[arg(long)]
    pub jwt: Option<String>,
    /// Timeout of each API request (not of a restore's stream), e.g. `30s`;
    /// creating a timeline that follows a primary takes a base backup.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

pub struct Api {
    base: String,
    jwt: Option<String>,
    client: Client,
    /// No overall timeout: for streamed bodies.
    streaming: Client,
}

impl Api {
    pub fn new(conn: &Conn) -> anyhow::Result<Api> {
        let build = |timeout: Option<Duration>| {
            Client::builder().connect_timeout(CONNECT_TIMEOUT).timeout(timeout).build()
        };
        Ok(Api {
            base: conn.pageserver.trim_end_matches('/').to_string(),
            jwt: conn.jwt.clone().or_else(|| std::env::var(JWT_ENV).ok()),
            client: build(Some(conn.timeout)).context("HTTP client")?,
            streaming: build(None).context("HTTP client")?,
        })
    }

    fn request(&self, client: &Client, method: Method, path: &str) -> RequestBuilder {
        let req = client.request(method, format!("{}{path}", self.base));
        match &self.jwt {
            Some(token) => req.bearer_auth(token),
            None => req,
        }
    }

    /// Send, and turn anything but a 2xx into an error naming the request.
    fn send(&self, method: Method, path: &str, req: RequestBuilder) -> anyhow::Result<Response> {
        let what = format!("{method} {}{path}", self.base);
        let resp = req.send().with_context(|| format!("{what}: no answer"))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let body = resp.text().unwrap_or_default();
        let msg = serde_json::from_str::<Value>(&body)
            .ok()
            .and_then(|v| v.get("msg").and_then(Value::as_str).map(str::to_string))
            .unwrap_or(body);
        Err(anyhow!("{what}: {status}: {msg}"))
    }

    /// A JSON request (`body` sent as JSON when given); the JSON answer.
    pub fn json(&self, method: Method, path: &str, body: Option<&Value>) -> anyhow::Result<Value> {
        let mut req = self.request(&self.client, method.clone(), path);
        if let Some(body) = body {
            req = req.json(body);
        }
        let resp = self.send(method.clone(), path, req)?;
        let text = resp.text().with_context(|| format!("{method} {path}: reading the answer"))?;
        if text.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text)
            .with_context(|| format!("{method} {path}: the answer is not JSON: {text:.200}"))
    }

    pub fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.json(Method::GET, path, None)
    }

    /// A GET whose body is read as it arrives (`fullbackup`).
    pub fn get_stream(&self, path: &str) -> anyhow::Result<Response> {
        let req = self.request(&self.streaming, Method::GET, path);
        self.send(Method::GET, path, req)
    }
}

/// Decode a JSON answer into a model, naming what it was.
pub fn decode<T: serde::de::DeserializeOwned>(v: Value, what: &str) -> anyhow::Result<T> {
    serde_json::from_value(v).with_context(|| format!("unexpected answer to {what}"))
}
