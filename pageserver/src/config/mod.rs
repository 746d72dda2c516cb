//! Daemon configuration: TOML (`ConfigToml`) validated into `PageServerConf`.
//!
//! Sources: built-in defaults (`defaults`), an optional config file
//! (`--config FILE`), then `-c key=value` overrides. See `docs/configuration.md`
//! and `config/pageserver.toml` for every key.
//!
//! Invariants:
//! - a `PageServerConf` only exists validated: every value is in range, the
//!   listen addresses resolve, JWT auth has a parseable public key, and the
//!   page service pipelining fits `max_get_vectored_keys`
//!   (`PageServiceConf::validate` runs here, not only when the service starts);
//! - every `ConfigError` names the key (or the file / override) it is about;
//! - `remote_storage` is connected here, once (`remote.rs`): every clone of
//!   the config and the storage engine share that one `RemoteStorage`; its
//!   credentials come from the environment and are never logged;
//! - relative paths in the config are resolved against the workdir.

pub mod config_toml;
pub mod defaults;
pub mod fd_budget;
pub mod remote;

#[cfg(test)]
mod tests;

use std::net::ToSocketAddrs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use io_engine::{IoEngine, IoEngineKind};
use pageserver_api::config::PageServicePipeliningConfig;
use serde::Deserialize;

use crate::auth::JwtAuth;
use crate::basebackup::limits::BackupLimits;
use crate::http::HttpConf;
use crate::page_service::PageServiceConf;
use crate::remote_storage::RemoteStorage;
use crate::tenant::{CompactionConf, EvictionConf, StorageConf};
use crate::walreceiver::WalReceiverConf;
pub use config_toml::ConfigToml;
use fd_budget::FdBudget;

/// Log line format (`log_format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    Plain,
    Json,
}

pub use pageserver_api::config::AuthType;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{origin}: {msg}")]
    Syntax { origin: String, msg: String },
    #[error("config key `{key}`: {msg}")]
    Key { key: String, msg: String },
}

fn key_err(key: &str, msg: impl Into<String>) -> ConfigError {
    ConfigError::Key { key: key.to_string(), msg: msg.into() }
}

/// The validated configuration of a running daemon.
#[derive(Debug, Clone)]
pub struct PageServerConf {
    /// Absolute. Tenants live in `workdir/tenants/`.
    pub workdir: PathBuf,
    pub listen_pg_addr: String,
    pub listen_http_addr: String,
    pub wait_lsn_timeout: Duration,
    /// Bytes.
    pub checkpoint_distance: u64,
    pub checkpoint_timeout: Duration,
    pub max_get_vectored_keys: usize,
    /// Bytes.
    pub in_memory_layers_budget: u64,
    /// Ingest checks native redo against PostgreSQL's consistency images.
    pub wal_redo_check: bool,
    pub backup_limits: BackupLimits,
    pub io_engine: IoEngine,
    /// Layer and ephemeral files use `O_DIRECT` (checked at start-up by
    /// `check_direct_io`).
    pub direct_io: bool,
    pub log_format: LogFormat,
    pub page_service_pipelining: PageServicePipeliningConfig,
    pub pg_auth_type: AuthType,
    /// Absolute; `Some` whenever `pg_auth_type` is `Jwt`.
    pub auth_validation_public_key_path: Option<PathBuf>,
    pub shutdown_timeout: Duration,
    pub authentication_timeout: Duration,
    /// Page service connection threads (`page_service_threads`; 0: none,
    /// connections run on the daemon's runtime).
    pub page_service_threads: usize,
    /// The benchmark floor (`page_service_constant_pages`, testing builds).
    pub page_service_constant_pages: bool,
    /// Descriptor limits: open layer files, page service and HTTP connections.
    pub fd_budget: FdBudget,
    pub http: HttpConf,
    pub walreceiver: WalReceiverConf,
    pub lsn_lease_length: Duration,
    pub compaction: CompactionConf,
    /// Bytes.
    pub layer_index_cache_size: u64,
    /// The one connection to remote storage (`remote_storage`), shared by
    /// every clone of this config and by the storage engine.
    pub remote_storage: Option<Arc<RemoteStorage>>,
    /// `disk_usage_based_eviction`; its period is zero when it is not set.
    pub eviction: EvictionConf,
}

/// Largest config file accepted (a real one is a few KiB).
pub const MAX_CONFIG_FILE_BYTES: u64 = 1024 * 1024;

impl PageServerConf {
    /// Read `config_file` (if any), apply `overrides` (`key=value`, TOML value
    /// syntax) and validate. `workdir` must be absolute or relative to the
    /// current directory; it is not created here.
    pub fn load(
        workdir: &Path,
        config_file: Option<&Path>,
        overrides: &[String],
    ) -> Result<PageServerConf, ConfigError> {
        let mut table = match config_file {
            Some(path) => {
                let text = read_config_file(path)?;
                ConfigToml::parse_document(&path.display().to_string(), &text)?
            }
            None => toml::Table::new(),
        };
        for spec in overrides {
            ConfigToml::apply_override(&mut table, spec)?;
        }
        let toml = ConfigToml::from_table(table)?;
        PageServerConf::from_toml(workdir, toml)
    }

    /// Validate a parsed document: the one place where every key is
    /// checked and wired. The struct is destructured without `..`, so a key
    /// added to `ConfigToml` and not handled here does not compile.
    pub fn from_toml(workdir: &Path, t: ConfigToml) -> Result<PageServerConf, ConfigError> {
        let ConfigToml {
            listen_pg_addr,
            listen_http_addr,
            wait_lsn_timeout,
            checkpoint_distance,
            checkpoint_timeout,
            max_get_vectored_keys,
            in_memory_layers_budget,
            io_engine,
            direct_io,
            max_open_files,
            log_format,
            page_service_pipelining,
            pg_auth_type,
            auth_validation_public_key_path,
            shutdown_timeout,
            authentication_timeout,
            page_service_max_connections,
            page_service_threads,
            page_service_constant_pages,
            http_max_connections,
            http_max_concurrent_requests,
            http_header_read_timeout,
            http_body_read_timeout,
            http_auth_type,
            http_auth_open_routes,
            wal_receiver_status_interval,
            wal_receiver_idle_flush,
            wal_receiver_timeout,
            wal_receiver_slot_advance_interval,
            wal_redo_check,
            max_concurrent_backups,
            max_concurrent_backups_per_tenant,
            lsn_lease_length,
            compaction_threshold,
            compaction_target_size,
            compaction_period,
            image_creation_threshold,
            max_record_chain,
            l0_flush_delay_threshold,
            l0_flush_stall_threshold,
            gc_horizon,
            pitr_interval,
            gc_period,
            layer_index_cache_size,
            remote_storage,
            disk_usage_based_eviction,
        } = t;
        let workdir = std::path::absolute(&workdir)
            .map_err(|e| key_err("workdir", format!("{}: {e}", workdir.display())))?;
        check_addr("listen_pg_addr", &listen_pg_addr)?;
        check_addr("listen_http_addr", &listen_http_addr)?;
        nonzero("wait_lsn_timeout", wait_lsn_timeout.is_zero())?;
        nonzero("checkpoint_distance", checkpoint_distance.as_u64() == 0)?;
        nonzero("checkpoint_timeout", checkpoint_timeout.is_zero())?;
        nonzero("in_memory_layers_budget", in_memory_layers_budget.as_u64() == 0)?;
        nonzero("shutdown_timeout", shutdown_timeout.is_zero())?;
        nonzero("authentication_timeout", authentication_timeout.is_zero())?;
        nonzero("http_max_concurrent_requests", http_max_concurrent_requests == 0)?;
        nonzero("http_header_read_timeout", http_header_read_timeout.is_zero())?;
        nonzero("http_body_read_timeout", http_body_read_timeout.is_zero())?;
        nonzero("wal_receiver_status_interval", wal_receiver_status_interval.is_zero())?;
        nonzero("wal_receiver_idle_flush", wal_receiver_idle_flush.is_zero())?;
        nonzero(
            "wal_receiver_slot_advance_interval",
            wal_receiver_slot_advance_interval.is_zero(),
        )?;
        nonzero("lsn_lease_length", lsn_lease_length.is_zero())?;
        nonzero("max_concurrent_backups", max_concurrent_backups == 0)?;
        nonzero("max_concurrent_backups_per_tenant", max_concurrent_backups_per_tenant == 0)?;
        let backup_limits = BackupLimits {
            total: max_concurrent_backups,
            per_tenant: max_concurrent_backups_per_tenant,
        };
        let compaction = check_compaction(CompactionConf {
            compaction_threshold,
            compaction_target_size: compaction_target_size.as_u64(),
            compaction_period,
            image_creation_threshold,
            max_record_chain,
            l0_flush_delay_threshold,
            l0_flush_stall_threshold,
            gc_horizon: gc_horizon.as_u64(),
            pitr_interval,
            gc_period,
        })?;
        nonzero("layer_index_cache_size", layer_index_cache_size.as_u64() == 0)?;
        let remote_storage = remote::check_remote_storage(remote_storage)?;
        let eviction = remote::check_eviction(disk_usage_based_eviction, remote_storage.is_some())?;
        let walreceiver = WalReceiverConf {
            status_interval: wal_receiver_status_interval,
            idle_flush_after: wal_receiver_idle_flush,
            timeout: (!wal_receiver_timeout.is_zero()).then_some(wal_receiver_timeout),
            slot_advance_interval: wal_receiver_slot_advance_interval,
            ..WalReceiverConf::default()
        };
        if !(1..=defaults::MAX_GET_VECTORED_KEYS_LIMIT).contains(&max_get_vectored_keys) {
            return Err(key_err(
                "max_get_vectored_keys",
                format!(
                    "{max_get_vectored_keys} is out of range 1..={}",
                    defaults::MAX_GET_VECTORED_KEYS_LIMIT
                ),
            ));
        }
        let auth_validation_public_key_path =
            auth_validation_public_key_path.as_ref().map(|p| workdir.join(p));
        let fd_budget = FdBudget::resolve(
            fd_budget::nofile_soft_limit(),
            max_open_files,
            page_service_max_connections,
            http_max_connections,
        )?;
        let page_service_threads =
            page_service_threads.unwrap_or_else(|| crate::page_service::default_threads().get());
        if page_service_constant_pages && !cfg!(feature = "testing") {
            return Err(key_err(
                "page_service_constant_pages",
                "the benchmark floor serves a constant page for every GetPage, whatever the \
                 data: it exists only in builds with the testing feature"
                    .to_string(),
            ));
        }
        let page_service = PageServiceConf {
            pipelining: page_service_pipelining.clone(),
            auth_type: pg_auth_type,
            auth_validation_public_key_path: auth_validation_public_key_path.clone(),
            authentication_timeout,
            max_connections: fd_budget.page_service_max_connections,
            threads: page_service_threads,
            constant_pages: page_service_constant_pages,
        };
        check_page_service(&page_service, max_get_vectored_keys)?;
        let io_engine = IoEngine::with_max_open_files(io_engine, fd_budget.max_open_files)
            .map_err(|e| key_err("io_engine", format!("cannot start engine {io_engine:?}: {e}")))?;
        let http = HttpConf {
            header_read_timeout: http_header_read_timeout,
            body_read_timeout: http_body_read_timeout,
            max_connections: fd_budget.http_max_connections,
            max_concurrent_requests: http_max_concurrent_requests,
            auth: check_http_auth(http_auth_type, auth_validation_public_key_path.as_deref())?,
            auth_open_routes: check_open_routes(http_auth_open_routes)?,
        };

        Ok(PageServerConf {
            workdir,
            listen_pg_addr,
            listen_http_addr,
            wait_lsn_timeout,
            checkpoint_distance: checkpoint_distance.as_u64(),
            checkpoint_timeout,
            max_get_vectored_keys,
            in_memory_layers_budget: in_memory_layers_budget.as_u64(),
            wal_redo_check,
            backup_limits,
            io_engine,
            direct_io,
            log_format,
            page_service_pipelining,
            pg_auth_type,
            auth_validation_public_key_path,
            shutdown_timeout,
            authentication_timeout,
            page_service_threads,
            page_service_constant_pages,
            fd_budget,
            http,
            walreceiver,
            lsn_lease_length,
            compaction,
            layer_index_cache_size: layer_index_cache_size.as_u64(),
            remote_storage,
            eviction,
        })
    }

    /// Built-in defaults rooted at `workdir` (tests).
    pub fn defaults(workdir: &Path) -> PageServerConf {
        PageServerConf::from_toml(workdir, ConfigToml::default()).expect("defaults are valid")
    }

    /// The settings of the storage engine.
    pub fn storage_conf(&self) -> StorageConf {
        StorageConf {
            workdir: self.workdir.clone(),
            checkpoint_distance: self.checkpoint_distance,
            checkpoint_timeout: self.checkpoint_timeout,
            wait_lsn_timeout: self.wait_lsn_timeout,
            max_get_vectored_keys: self.max_get_vectored_keys,
            in_memory_layers_budget: self.in_memory_layers_budget,
            wal_redo_check: self.wal_redo_check,
            backup_limits: self.backup_limits,
            io_engine: self.io_engine.clone(),
            direct_io: self.direct_io,
            lsn_lease_length: self.lsn_lease_length,
            compaction: self.compaction.clone(),
            layer_index_cache_size: self.layer_index_cache_size,
            remote_storage: self.remote_storage.clone(),
            eviction: self.eviction.clone(),
        }
    }

    /// The settings of the page service.
    pub fn page_service_conf(&self) -> PageServiceConf {
        PageServiceConf {
            pipelining: self.page_service_pipelining.clone(),
            auth_type: self.pg_auth_type,
            auth_validation_public_key_path: self.auth_validation_public_key_path.clone(),
            authentication_timeout: self.authentication_timeout,
            max_connections: self.fd_budget.page_service_max_connections,
            threads: self.page_service_threads,
            constant_pages: self.page_service_constant_pages,
        }
    }

    pub fn io_engine_kind(&self) -> IoEngineKind {
        self.io_engine.kind()
    }
}

fn nonzero(key: &str, is_zero: bool) -> Result<(), ConfigError> {
    if is_zero {
        return Err(key_err(key, "must be greater than 0"));
    }
    Ok(())
}

/// Compaction and GC settings: thresholds in range and in order (ingest is
/// delayed only once compaction is due, and stalls only after the delay).
fn check_compaction(c: CompactionConf) -> Result<CompactionConf, ConfigError> {
    if c.compaction_threshold < 2 {
        return Err(key_err(
            "compaction_threshold",
            "must be at least 2 (it counts L0 layers to merge)",
        ));
    }
    nonzero("compaction_target_size", c.compaction_target_size == 0)?;
    nonzero("image_creation_threshold", c.image_creation_threshold == 0)?;
    nonzero("max_record_chain", c.max_record_chain == 0)?;
    let above = |key: &str, v: usize, other: &str, o: usize| {
        if v > o {
            return Ok(());
        }
        Err(key_err(key, format!("{v} must be above {other} {o}")))
    };
    // Ingest must not slow before compaction starts, nor stall before the delay.
    above(
        "l0_flush_delay_threshold",
        c.l0_flush_delay_threshold,
        "compaction_threshold",
        c.compaction_threshold,
    )?;
    above(
        "l0_flush_stall_threshold",
        c.l0_flush_stall_threshold,
        "l0_flush_delay_threshold",
        c.l0_flush_delay_threshold,
    )?;
    Ok(c)
}

fn check_addr(key: &str, addr: &str) -> Result<(), ConfigError> {
    match addr.to_socket_addrs().map(|mut addrs| addrs.next().is_some()) {
        Ok(true) => Ok(()),
        Ok(false) => Err(key_err(key, format!("'{addr}' resolves to no address"))),
        Err(e) => Err(key_err(key, format!("'{addr}' is not a host:port address: {e}"))),
    }
}

/// Pipelining against the vectored-get limit, and JWT auth with a readable
/// key: the page service's own start-up checks, run now so that a bad
/// combination fails before anything starts. Its messages begin with the
/// key they are about ("key: ...").
fn check_page_service(
    ps: &PageServiceConf,
    max_get_vectored_keys: usize,
) -> Result<(), ConfigError> {
    if let PageServicePipeliningConfig::Pipelined(p) = &ps.pipelining {
        if p.max_batch_size.get() > max_get_vectored_keys {
            return Err(key_err(
                "page_service_pipelining",
                format!(
                    "max_batch_size {} exceeds max_get_vectored_keys {max_get_vectored_keys}",
                    p.max_batch_size
                ),
            ));
        }
    }
    match (ps.auth_type, &ps.auth_validation_public_key_path) {
        (AuthType::Jwt, None) => {
            return Err(key_err(
                "auth_validation_public_key_path",
                "required when pg_auth_type = \"jwt\"",
            ))
        }
        (_, Some(path)) => {
            if let Err(e) = std::fs::metadata(path) {
                return Err(key_err(
                    "auth_validation_public_key_path",
                    format!("cannot read {}: {e}", path.display()),
                ));
            }
        }
        (AuthType::Trust, None) => {}
    }
    let split_key = |msg: String, default_key: &str| match msg.split_once(": ") {
        Some((key, rest)) if !key.contains(' ') => key_err(key, rest),
        _ => key_err(default_key, msg),
    };
    ps.validate(max_get_vectored_keys).map_err(|msg| split_key(msg, "page_service_pipelining"))?;
    ps.load_auth().map_err(|e| key_err("auth_validation_public_key_path", format!("{e:#}")))?;
    Ok(())
}

/// `http_auth_type`: with `"jwt"`, the key that checks the HTTP API's tokens
/// (the page service's key; loaded here, so a bad one fails start-up).
fn check_http_auth(
    auth_type: AuthType,
    key_path: Option<&Path>,
) -> Result<Option<Arc<JwtAuth>>, ConfigError> {
    const KEY: &str = "auth_validation_public_key_path";
    match (auth_type, key_path) {
        (AuthType::Trust, _) => Ok(None),
        (AuthType::Jwt, None) => Err(key_err(KEY, "required when http_auth_type = \"jwt\"")),
        (AuthType::Jwt, Some(path)) => JwtAuth::from_key_path(path)
            .map(|auth| Some(Arc::new(auth)))
            .map_err(|e| key_err(KEY, format!("{e:#}"))),
    }
}

/// `http_auth_open_routes`: a subset of [`crate::http::OPENABLE_ROUTES`].
fn check_open_routes(routes: Vec<String>) -> Result<Vec<String>, ConfigError> {
    for route in &routes {
        if !crate::http::OPENABLE_ROUTES.contains(&route.as_str()) {
            return Err(key_err(
                "http_auth_open_routes",
                format!(
                    "{} cannot be opened: only {} can (they carry no tenant data)",
                    utils::quote::quote(route),
                    crate::http::OPENABLE_ROUTES.join(" and ")
                ),
            ));
        }
    }
    Ok(routes)
}

/// The config file: a regular file of at most [`MAX_CONFIG_FILE_BYTES`]
/// (`/dev/zero` or a FIFO would otherwise be read without bound).
fn read_config_file(path: &Path) -> Result<String, ConfigError> {
    use std::io::Read;
    let read_err = |source| ConfigError::Read { path: path.to_path_buf(), source };
    let invalid =
        |msg: String| read_err(std::io::Error::new(std::io::ErrorKind::InvalidInput, msg));
    let file = std::fs::File::open(path).map_err(read_err)?;
    let meta = file.metadata().map_err(read_err)?;
    if !meta.is_file() {
        return Err(invalid("not a regular file".to_string()));
    }
    if meta.len() > MAX_CONFIG_FILE_BYTES {
        return Err(invalid(format!(
            "{} bytes, more than the {MAX_CONFIG_FILE_BYTES} a config file may have",
            meta.len()
        )));
    }
    let mut text = String::new();
    // The file may grow after the check: read one byte past the bound at most.
    file.take(MAX_CONFIG_FILE_BYTES + 1).read_to_string(&mut text).map_err(read_err)?;
    if text.len() as u64 > MAX_CONFIG_FILE_BYTES {
        return Err(invalid(format!("more than {MAX_CONFIG_FILE_BYTES} bytes")));
    }
    Ok(text)
}
