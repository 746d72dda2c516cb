//! The pageserver daemon: keeps every version of every page of a PostgreSQL
//! cluster and serves `GetPage@LSN` over libpq.
//!
//! Layout: `config` (TOML), `tenant` (the layered page store), `pgdatadir_mapping`
//! (PostgreSQL concepts on top of keys), `import` (base backups), `page_service`
//! (libpq pagestream), `http` (management API), `metrics` (Prometheus).

pub mod auth;
pub mod background;
pub mod basebackup;
pub mod config;
pub mod http;
pub mod import;
pub mod metrics;
pub mod page_service;
pub mod pgdatadir_mapping;
pub mod remote_storage;
pub mod tenant;
pub mod walingest;
pub mod walreceiver;
