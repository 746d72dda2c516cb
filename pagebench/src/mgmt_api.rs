//! Minimal client of the pageserver management API: the three calls the load
//! generator needs (list tenants, list a tenant's timelines, a timeline's
//! keyspace). Only the fields used here are deserialized, so additions to the
//! API do not break the tool. Requests carry `content-type: application/json`
//! and a `null` body even on GET, as Neon's client does, and
//! `Authorization: Bearer <jwt>` when given one (`http_auth_type = "jwt"`).

use anyhow::{bail, Context};
use pageserver_api::key::Key;
use serde::Deserialize;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

pub struct MgmtApiClient {
    endpoint: String,
    http: reqwest::Client,
    /// Sent as a Bearer token.
    jwt: Option<String>,
}

#[derive(Deserialize)]
struct TenantListItem {
    id: TenantId,
}

#[derive(Deserialize)]
struct TenantDetail {
    timelines: Vec<TimelineId>,
}

/// `GET .../keyspace`: end-exclusive key ranges present at `at_lsn`.
#[derive(Debug, Deserialize)]
pub struct KeyspaceResponse {
    pub keys: Vec<(Key, Key)>,
    pub at_lsn: Lsn,
}

impl MgmtApiClient {
    pub fn new(endpoint: &str, jwt: Option<&str>) -> anyhow::Result<MgmtApiClient> {
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(60))
            .build()
            .context("build HTTP client")?;
        Ok(MgmtApiClient {
            endpoint: endpoint.trim_end_matches('/').to_string(),
            http,
            jwt: jwt.map(str::to_string),
        })
    }

    async fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        let url = format!("{}{}", self.endpoint, path);
        let mut req = self.http.get(&url).header(reqwest::header::CONTENT_TYPE, "application/json");
        if let Some(jwt) = &self.jwt {
            req = req.bearer_auth(jwt);
        }
        let resp = req.body("null").send().await.with_context(|| format!("GET {url}"))?;
        let status = resp.status();
        let body = resp.bytes().await.with_context(|| format!("read body of GET {url}"))?;
        if !status.is_success() {
            bail!("GET {url}: HTTP {status}: {}", String::from_utf8_lossy(&body));
        }
        serde_json::from_slice(&body).with_context(|| format!("decode response of GET {url}"))
    }

    pub async fn list_tenants(&self) -> anyhow::Result<Vec<TenantId>> {
        let list: Vec<TenantListItem> = self.get("/v1/tenant").await?;
        Ok(list.into_iter().map(|t| t.id).collect())
    }

    pub async fn list_timelines(&self, tenant: TenantId) -> anyhow::Result<Vec<TimelineId>> {
        let detail: TenantDetail = self.get(&format!("/v1/tenant/{tenant}")).await?;
        Ok(detail.timelines)
    }

    pub async fn keyspace(
        &self,
        tenant: TenantId,
        timeline: TimelineId,
    ) -> anyhow::Result<KeyspaceResponse> {
        self.get(&format!("/v1/tenant/{tenant}/timeline/{timeline}/keyspace")).await
    }
}
