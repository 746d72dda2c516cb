//! Default values of every config key, in the human units an operator writes.
//!
//! Invariant: each constant parses with the same parser as the TOML value of
//! its key (`humantime` for durations, `bytesize` for sizes); a unit test
//! checks it, so `ConfigToml::default()` can never fail. `config/pageserver.toml`
//! and `docs/configuration.md` repeat these values and must be kept in step.

pub const DEFAULT_LISTEN_PG_ADDR: &str = "127.0.0.1:64000";
pub const DEFAULT_LISTEN_HTTP_ADDR: &str = "127.0.0.1:9898";

/// How long a read above `last_record_lsn` waits for WAL to arrive.
pub const DEFAULT_WAIT_LSN_TIMEOUT: &str = "300 s";

/// The open in-memory layer is frozen once it holds this many bytes.
pub const DEFAULT_CHECKPOINT_DISTANCE: &str = "256 MiB";

/// The open in-memory layer is frozen this long after it was opened.
pub const DEFAULT_CHECKPOINT_TIMEOUT: &str = "10 m";

/// Most keys one vectored read may ask for.
pub const DEFAULT_MAX_GET_VECTORED_KEYS: usize = 32;

/// Upper bound on bytes held by in-memory layers of all timelines together.
pub const DEFAULT_IN_MEMORY_LAYERS_BUDGET: &str = "1 GiB";

/// How long a graceful shutdown may take per stage before it gives up waiting.
pub const DEFAULT_SHUTDOWN_TIMEOUT: &str = "10 s";

/// From connecting to authenticated, per page service client (PostgreSQL's
/// `authentication_timeout` is the model; its default is 1 minute, ours is
/// shorter because our clients are programs, not people typing passwords).
pub const DEFAULT_AUTHENTICATION_TIMEOUT: &str = "10 s";

/// Routes served without a token with `http_auth_type = "jwt"`: the only
/// two that may be (`crate::http::OPENABLE_ROUTES`).
pub const DEFAULT_HTTP_AUTH_OPEN_ROUTES: &[&str] = &["/v1/status", "/metrics"];

/// Requests the HTTP API runs at once; more get a 503.
pub const DEFAULT_HTTP_MAX_CONCURRENT_REQUESTS: usize = 64;

/// Backups (basebackup, fullbackup) generated at once in the daemon, and
/// per tenant; one more is refused (53300 over libpq, 503 over HTTP). Each
/// holds about 1.3 MiB while its client reads slowly (`basebackup/tar.rs`).
pub const DEFAULT_MAX_CONCURRENT_BACKUPS: usize = 64;
pub const DEFAULT_MAX_CONCURRENT_BACKUPS_PER_TENANT: usize = 16;

/// How long an HTTP client may take to send a request's headers.
pub const DEFAULT_HTTP_HEADER_READ_TIMEOUT: &str = "10 s";

/// How long an HTTP client may pause while sending a request body.
pub const DEFAULT_HTTP_BODY_READ_TIMEOUT: &str = "60 s";

/// Standby status updates to a followed primary at least this often.
pub const DEFAULT_WAL_RECEIVER_STATUS_INTERVAL: &str = "10 s";

/// With no WAL for this long, a WAL receiver makes what it ingested durable
/// and reports it (the slot advances; a stopping primary is not kept waiting).
pub const DEFAULT_WAL_RECEIVER_IDLE_FLUSH: &str = "10 s";

/// A WAL receiver that heard nothing from its primary (neither WAL nor a
/// keepalive) for this long drops the connection and reconnects
/// (PostgreSQL's `wal_receiver_timeout` default).
pub const DEFAULT_WAL_RECEIVER_TIMEOUT: &str = "60 s";

/// How often the slot keeper of a multi-host source creates missing slots
/// on, and advances the slots of, the hosts it does not stream from.
pub const DEFAULT_WAL_RECEIVER_SLOT_ADVANCE_INTERVAL: &str = "10 s";

/// How long an LSN lease lasts from its latest renewal (Neon's default).
pub const DEFAULT_LSN_LEASE_LENGTH: &str = "10 m";

/// Compaction merges the L0 layers into L1 layers once there are this many.
pub const DEFAULT_COMPACTION_THRESHOLD: usize = 10;

/// Target size of an L1 delta layer written by compaction.
pub const DEFAULT_COMPACTION_TARGET_SIZE: &str = "128 MiB";

/// How often the background task checks whether to compact ("0 s": never;
/// `PUT .../compact` still works).
pub const DEFAULT_COMPACTION_PERIOD: &str = "20 s";

/// An image layer is written for a key range whose delta layers above its
/// newest image are more than this many.
pub const DEFAULT_IMAGE_CREATION_THRESHOLD: usize = 3;
/// Records of one key since its last image after which ingest writes an
/// image of it (`docs/benchmarks.md`, "Hot pages").
pub const DEFAULT_MAX_RECORD_CHAIN: usize = 256;

/// Ingest is delayed once the L0 count reaches this, and stops (until
/// compaction catches up) at the stall threshold.
pub const DEFAULT_L0_FLUSH_DELAY_THRESHOLD: usize = 20;
pub const DEFAULT_L0_FLUSH_STALL_THRESHOLD: usize = 40;

/// GC keeps at least this many bytes of WAL history below `last_record_lsn`.
pub const DEFAULT_GC_HORIZON: &str = "64 MiB";

/// GC keeps the history of this long ("0 s": only `gc_horizon` counts).
pub const DEFAULT_PITR_INTERVAL: &str = "7 days";

/// How often GC runs in the background ("0 s": never; `PUT .../do_gc` still works).
pub const DEFAULT_GC_PERIOD: &str = "1 h";

/// Bytes of layer index blocks cached in memory, for all layers together.
pub const DEFAULT_LAYER_INDEX_CACHE_SIZE: &str = "64 MiB";

/// How often disk-usage-based eviction checks, when its table leaves
/// `period` out.
pub const DEFAULT_EVICTION_PERIOD: &str = "10 s";

/// Accepted range of `max_get_vectored_keys`.
pub const MAX_GET_VECTORED_KEYS_LIMIT: usize = 4096;
