//! The WAL sources (`wal_source.json`) of timelines as they are on disk,
//! Broken tenants and timelines included: the slots a delete must release,
//! and the slots the timelines of this pageserver use (a `PUT .../source`
//! must not adopt one of those). Directories being created or deleted
//! (`.___temp`, `.___deleted`) are left out.

use std::path::Path;

use utils::id::{TenantId, TimelineId};

use super::TenantManager;
use crate::tenant::timeline::wal_source::WalSource;
use crate::tenant::DELETED_SUFFIX;

/// One timeline's source as read from its directory.
#[derive(Debug)]
pub struct TimelineSource {
    pub timeline_id: TimelineId,
    /// `Err`: the file or the directory could not be read (the reason).
    pub source: Result<Option<WalSource>, String>,
}

impl TenantManager {
    /// The sources of the timelines of tenant `id` (only `timeline`, if
    /// given) that have one, or whose source could not be read. `Err`: the
    /// tenant's timelines could not be listed (the reason); a tenant
    /// without a timelines directory has none.
    pub async fn wal_sources_on_disk(
        &self,
        id: TenantId,
        timeline: Option<TimelineId>,
    ) -> Result<Vec<TimelineSource>, String> {
        let tl_dir = self.tenant_dir(id).join("timelines");
        let ids = match timeline {
            Some(tl) => vec![tl],
            None => self.timeline_ids_in(&tl_dir).await.map_err(|e| e.to_string())?,
        };
        let mut out = Vec::new();
        for timeline_id in ids {
            let dir = tl_dir.join(timeline_id.to_string());
            let source =
                WalSource::load(&self.conf.io_engine, &dir).await.map_err(|e| format!("{e:#}"));
            if !matches!(source, Ok(None)) {
                out.push(TimelineSource { timeline_id, source });
            }
        }
        Ok(out)
    }

    /// Every source of every timeline of this pageserver that has a
    /// readable one: (tenant, timeline, source).
    pub async fn all_wal_sources_on_disk(&self) -> Vec<(TenantId, TimelineId, WalSource)> {
        let dir = self.conf.tenants_dir();
        let Ok(entries) = self.conf.io_engine.read_dir(&dir).await else {
            return vec![];
        };
        let mut out = Vec::new();
        for entry in entries {
            let Ok(tenant) = entry.name_lossy().parse::<TenantId>() else {
                continue;
            };
            for ts in self.wal_sources_on_disk(tenant, None).await.unwrap_or_default() {
                if let Ok(Some(source)) = ts.source {
                    out.push((tenant, ts.timeline_id, source));
                }
            }
        }
        out
    }

    async fn timeline_ids_in(&self, tl_dir: &Path) -> std::io::Result<Vec<TimelineId>> {
        let mut ids = Vec::new();
        if !self.conf.io_engine.exists(tl_dir).await? {
            return Ok(ids);
        }
        for entry in self.conf.io_engine.read_dir(tl_dir).await? {
            let name = entry.name_lossy();
            if name.ends_with(io_engine::TEMP_SUFFIX) || name.ends_with(DELETED_SUFFIX) {
                continue;
            }
            if let Ok(id) = name.parse::<TimelineId>() {
                ids.push(id);
            }
        }
        ids.sort();
        Ok(ids)
    }
}
