//! Configuration types shared by the daemon and tools.
//!
//! `page_service_pipelining` (TOML), in Neon's shape:
//! `{ mode = "serial" }` or `{ mode = "pipelined", max_batch_size = 32,
//! execution = "concurrent-futures" | "tasks", batching = "uniform-lsn" | "scattered-lsn" }`.

use std::num::NonZeroUsize;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "kebab-case", deny_unknown_fields)]
pub enum PageServicePipeliningConfig {
    Serial,
    Pipelined(PageServicePipeliningConfigPipelined),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageServicePipeliningConfigPipelined {
    pub max_batch_size: NonZeroUsize,
    pub execution: PageServiceProtocolPipelinedExecutionStrategy,
    #[serde(default)]
    pub batching: PageServiceProtocolPipelinedBatchingStrategy,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PageServiceProtocolPipelinedExecutionStrategy {
    ConcurrentFutures,
    Tasks,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PageServiceProtocolPipelinedBatchingStrategy {
    UniformLsn,
    #[default]
    ScatteredLsn,
}

impl Default for PageServicePipeliningConfig {
    fn default() -> Self {
        PageServicePipeliningConfig::Pipelined(PageServicePipeliningConfigPipelined {
            max_batch_size: NonZeroUsize::new(32).unwrap(),
            execution: PageServiceProtocolPipelinedExecutionStrategy::ConcurrentFutures,
            batching: PageServiceProtocolPipelinedBatchingStrategy::ScatteredLsn,
        })
    }
}
