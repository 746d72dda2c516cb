//! Config parsing: defaults, file + overrides, and that every error names its key.

use std::num::NonZeroUsize;
use std::path::Path;
use std::time::Duration;

use pageserver_api::config::{
    PageServicePipeliningConfig, PageServiceProtocolPipelinedBatchingStrategy,
    PageServiceProtocolPipelinedExecutionStrategy,
};

use super::defaults::*;
use super::*;

fn load(overrides: &[&str]) -> Result<PageServerConf, ConfigError> {
    let overrides: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    PageServerConf::load(Path::new("/tmp/ps-config-test"), None, &overrides)
}

/// The error message for `overrides`; asserts it names `key`.
fn err_naming(overrides: &[&str], key: &str) -> String {
    let err = load(overrides).expect_err("config must be rejected").to_string();
    assert!(
        err.contains(&format!("`{key}`")),
        "error for {overrides:?} does not name {key}: {err}"
    );
    err
}

#[test]
fn default_constants_parse() {
    for d in [
        DEFAULT_WAIT_LSN_TIMEOUT,
        DEFAULT_CHECKPOINT_TIMEOUT,
        DEFAULT_SHUTDOWN_TIMEOUT,
        DEFAULT_AUTHENTICATION_TIMEOUT,
        DEFAULT_HTTP_HEADER_READ_TIMEOUT,
        DEFAULT_HTTP_BODY_READ_TIMEOUT,
        DEFAULT_WAL_RECEIVER_STATUS_INTERVAL,
        DEFAULT_WAL_RECEIVER_IDLE_FLUSH,
        DEFAULT_WAL_RECEIVER_TIMEOUT,
        DEFAULT_WAL_RECEIVER_SLOT_ADVANCE_INTERVAL,
        DEFAULT_LSN_LEASE_LENGTH,
        DEFAULT_EVICTION_PERIOD,
    ] {
        humantime::parse_duration(d).unwrap();
    }
    for s in [DEFAULT_CHECKPOINT_DISTANCE, DEFAULT_IN_MEMORY_LAYERS_BUDGET] {
        s.parse::<bytesize::ByteSize>().unwrap();
    }
}

#[test]
fn defaults() {
    let conf = load(&[]).unwrap();
    assert_eq!(conf.workdir, Path::new("/tmp/ps-config-test"));
    assert_eq!(conf.listen_pg_addr, "127.0.0.1:64000");
    assert_eq!(conf.listen_http_addr, "127.0.0.1:9898");
    assert_eq!(conf.wait_lsn_timeout, Duration::from_secs(300));
    assert_eq!(conf.checkpoint_distance, 256 * 1024 * 1024);
    assert_eq!(conf.checkpoint_timeout, Duration::from_secs(600));
    assert_eq!(conf.max_get_vectored_keys, 32);
    assert_eq!(conf.in_memory_layers_budget, 1024 * 1024 * 1024);
    assert_eq!(conf.io_engine_kind(), io_engine::IoEngineKind::StdFs);
    assert_eq!(conf.log_format, LogFormat::Plain);
    assert_eq!(conf.pg_auth_type, AuthType::Trust);
    assert_eq!(conf.auth_validation_public_key_path, None);
    assert_eq!(conf.shutdown_timeout, Duration::from_secs(10));
    let PageServicePipeliningConfig::Pipelined(p) = &conf.page_service_pipelining else {
        panic!("default must be pipelined");
    };
    assert_eq!(p.max_batch_size.get(), 32);
    assert_eq!(p.execution, PageServiceProtocolPipelinedExecutionStrategy::ConcurrentFutures);
    assert_eq!(p.batching, PageServiceProtocolPipelinedBatchingStrategy::ScatteredLsn);
    assert_eq!(p.max_batches_in_flight.get(), 2);

    assert!(conf.remote_storage.is_none());
    assert!(conf.eviction.period.is_zero(), "no eviction by default");

    let storage = conf.storage_conf();
    assert!(storage.remote_storage.is_none());
    assert_eq!(storage.workdir, conf.workdir);
    assert_eq!(storage.checkpoint_distance, conf.checkpoint_distance);
    assert_eq!(storage.max_get_vectored_keys, 32);
}

#[test]
fn file_then_overrides() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pageserver.toml");
    std::fs::write(
        &file,
        r#"
listen_pg_addr = "127.0.0.1:15432"
checkpoint_distance = "1 MiB"
checkpoint_timeout = "30 s"
log_format = "json"
io_engine = "std-fs"

[page_service_pipelining]
mode = "pipelined"
max_batch_size = 8
execution = "tasks"
"#,
    )
    .unwrap();
    let overrides = vec![
        "listen_pg_addr='127.0.0.1:15433'".to_string(),
        "wait_lsn_timeout=\"1500ms\"".to_string(),
        "max_get_vectored_keys=64".to_string(),
        "in_memory_layers_budget=\"64 MiB\"".to_string(),
    ];
    let conf = PageServerConf::load(dir.path(), Some(&file), &overrides).unwrap();
    assert_eq!(conf.listen_pg_addr, "127.0.0.1:15433");
    assert_eq!(conf.listen_http_addr, DEFAULT_LISTEN_HTTP_ADDR);
    assert_eq!(conf.checkpoint_distance, 1024 * 1024);
    assert_eq!(conf.checkpoint_timeout, Duration::from_secs(30));
    assert_eq!(conf.wait_lsn_timeout, Duration::from_millis(1500));
    assert_eq!(conf.max_get_vectored_keys, 64);
    assert_eq!(conf.in_memory_layers_budget, 64 * 1024 * 1024);
    assert_eq!(conf.log_format, LogFormat::Json);
    // `batching` left out of a present table defaults to scattered-lsn.
    let PageServicePipeliningConfig::Pipelined(p) = &conf.page_service_pipelining else {
        panic!("file says pipelined");
    };
    assert_eq!(p.max_batch_size, NonZeroUsize::new(8).unwrap());
    assert_eq!(p.execution, PageServiceProtocolPipelinedExecutionStrategy::Tasks);
    assert_eq!(p.batching, PageServiceProtocolPipelinedBatchingStrategy::ScatteredLsn);

    // An override replaces the whole table.
    let mut with_serial = overrides.clone();
    with_serial.push(r#"page_service_pipelining={mode="serial"}"#.to_string());
    let conf = PageServerConf::load(dir.path(), Some(&file), &with_serial).unwrap();
    assert_eq!(conf.page_service_pipelining, PageServicePipeliningConfig::Serial);
}

#[test]
fn override_syntax_forms() {
    let conf = load(&[
        r#"checkpoint_distance="64 MiB""#,
        r#"checkpoint_timeout = "2 m""#,
        r#"page_service_pipelining={mode="pipelined", max_batch_size=4, execution="concurrent-futures", batching="uniform-lsn"}"#,
    ])
    .unwrap();
    assert_eq!(conf.checkpoint_distance, 64 * 1024 * 1024);
    assert_eq!(conf.checkpoint_timeout, Duration::from_secs(120));
    let PageServicePipeliningConfig::Pipelined(p) = &conf.page_service_pipelining else {
        panic!("pipelined");
    };
    assert_eq!(p.batching, PageServiceProtocolPipelinedBatchingStrategy::UniformLsn);
    // A later override of the same key wins.
    let conf = load(&["max_get_vectored_keys=40", "max_get_vectored_keys=50"]).unwrap();
    assert_eq!(conf.max_get_vectored_keys, 50);
    // Plain integers are bytes.
    let conf = load(&["checkpoint_distance=4096"]).unwrap();
    assert_eq!(conf.checkpoint_distance, 4096);
}

#[test]
fn every_error_names_its_key() {
    err_naming(&["no_such_key=1"], "no_such_key");
    // More batches in flight than pages per batch is fine: beside others a
    // batch then starts at one page. Neon's shape with max_batch_size = 1
    // (and our default of two in flight) starts.
    load(&[r#"page_service_pipelining={mode="pipelined", max_batch_size=4, execution="tasks", max_batches_in_flight=5}"#])
        .unwrap();
    load(&[r#"page_service_pipelining={mode="pipelined", max_batch_size=1, execution="tasks"}"#])
        .unwrap();
    err_naming(&["listen_pg_addr=\"not an address\""], "listen_pg_addr");
    err_naming(&["listen_http_addr=9898"], "listen_http_addr");
    err_naming(&["wait_lsn_timeout=\"soon\""], "wait_lsn_timeout");
    err_naming(&["wait_lsn_timeout=\"0s\""], "wait_lsn_timeout");
    let msg = err_naming(&["checkpoint_distance=\"lots\""], "checkpoint_distance");
    assert!(msg.contains("256 MiB"), "{msg}");
    err_naming(&["checkpoint_distance=-5"], "checkpoint_distance");
    err_naming(&["checkpoint_distance=0"], "checkpoint_distance");
    err_naming(&["checkpoint_timeout=5"], "checkpoint_timeout");
    err_naming(&["max_get_vectored_keys=0"], "max_get_vectored_keys");
    err_naming(&["max_get_vectored_keys=-1"], "max_get_vectored_keys");
    err_naming(&["max_get_vectored_keys=\"32\""], "max_get_vectored_keys");
    err_naming(&["in_memory_layers_budget=\"1 XB\""], "in_memory_layers_budget");
    err_naming(&["io_engine=\"io-magic\""], "io_engine");
    err_naming(&["log_format=\"xml\""], "log_format");
    err_naming(&["pg_auth_type=\"password\""], "pg_auth_type");
    err_naming(&["shutdown_timeout=\"0 s\""], "shutdown_timeout");
    err_naming(&[r#"page_service_pipelining={mode="eager"}"#], "page_service_pipelining");
    err_naming(
        &[r#"page_service_pipelining={mode="pipelined", max_batch_size=0, execution="tasks"}"#],
        "page_service_pipelining",
    );
    let msg = err_naming(
        &[
            "max_get_vectored_keys=16",
            r#"page_service_pipelining={mode="pipelined", max_batch_size=32, execution="tasks"}"#,
        ],
        "page_service_pipelining",
    );
    assert!(msg.contains("max_get_vectored_keys"), "{msg}");
    err_naming(&["pg_auth_type=\"jwt\""], "auth_validation_public_key_path");
    let msg = err_naming(&["http_auth_type=\"jwt\""], "auth_validation_public_key_path");
    assert!(msg.contains("http_auth_type"), "{msg}");
    err_naming(&["http_auth_type=\"password\""], "http_auth_type");
    let msg = err_naming(
        &["http_auth_open_routes=[\"/v1/tenant/{tenant_id}/timeline/{timeline_id}/fullbackup\"]"],
        "http_auth_open_routes",
    );
    assert!(msg.contains("fullbackup") && msg.contains("/metrics"), "{msg}");
    err_naming(
        &["auth_validation_public_key_path=\"/nonexistent/key.pem\""],
        "auth_validation_public_key_path",
    );
    // A value that is not TOML at all still names the key.
    let msg = err_naming(&["listen_pg_addr=127.0.0.1:1"], "listen_pg_addr");
    assert!(msg.contains("quotes"), "{msg}");
    // One bad key among good ones is the one named.
    let msg = err_naming(&["checkpoint_timeout=\"1 m\"", "log_format=1"], "log_format");
    assert!(!msg.contains("checkpoint_timeout"), "{msg}");
}

#[test]
fn file_errors() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.toml");
    let err = PageServerConf::load(dir.path(), Some(&missing), &[]).unwrap_err();
    assert!(matches!(err, ConfigError::Read { .. }), "{err}");

    let file = dir.path().join("bad.toml");
    std::fs::write(&file, "checkpoint_distance = \n").unwrap();
    let err = PageServerConf::load(dir.path(), Some(&file), &[]).unwrap_err().to_string();
    assert!(err.contains("bad.toml") && err.contains("checkpoint_distance"), "{err}");

    std::fs::write(&file, "[page_service_pipelining]\nmode = \"pipelined\"\n").unwrap();
    let err = PageServerConf::load(dir.path(), Some(&file), &[]).unwrap_err().to_string();
    assert!(err.contains("`page_service_pipelining`") && err.contains("max_batch_size"), "{err}");

    let err = PageServerConf::load(dir.path(), None, &["=1".to_string()]).unwrap_err();
    assert!(err.to_string().contains("key=value"), "{err}");
}

/// An Ed25519 public key (generated for these tests; its private half is unused).
const TEST_PUBLIC_KEY: &str = "-----BEGIN PUBLIC KEY-----
MCowBQYDK2VwAyEAFj3yQE2ra28uJFvK4DwM41EHNgA8o1EWLrwkFPbW7og=
-----END PUBLIC KEY-----
";

#[test]
fn jwt_key_path_is_relative_to_workdir() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("auth_public_key.pem"), TEST_PUBLIC_KEY).unwrap();
    let conf = PageServerConf::load(
        dir.path(),
        None,
        &[
            "pg_auth_type=\"jwt\"".to_string(),
            "auth_validation_public_key_path=\"auth_public_key.pem\"".to_string(),
        ],
    )
    .unwrap();
    assert_eq!(conf.pg_auth_type, AuthType::Jwt);
    assert_eq!(conf.auth_validation_public_key_path, Some(dir.path().join("auth_public_key.pem")));
}

#[test]
fn sample_config_file_is_exactly_the_defaults() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/pageserver.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let table = ConfigToml::parse_document("pageserver.toml", &text).unwrap();
    // Every key but the one without a default is written out.
    let mut keys: Vec<&str> = table.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "authentication_timeout",
            "checkpoint_distance",
            "checkpoint_timeout",
            "compaction_period",
            "compaction_target_size",
            "compaction_threshold",
            "gc_horizon",
            "gc_period",
            "http_auth_open_routes",
            "http_auth_type",
            "http_body_read_timeout",
            "http_header_read_timeout",
            "http_max_concurrent_requests",
            "image_creation_threshold",
            "in_memory_layers_budget",
            "io_engine",
            "l0_flush_delay_threshold",
            "l0_flush_stall_threshold",
            "layer_index_cache_size",
            "listen_http_addr",
            "listen_pg_addr",
            "log_format",
            "lsn_lease_length",
            "max_concurrent_backups",
            "max_concurrent_backups_per_tenant",
            "max_get_vectored_keys",
            "max_record_chain",
            "page_service_pipelining",
            "pg_auth_type",
            "pitr_interval",
            "shutdown_timeout",
            "wait_lsn_timeout",
            "wal_receiver_idle_flush",
            "wal_receiver_slot_advance_interval",
            "wal_receiver_status_interval",
            "wal_receiver_timeout",
            "wal_redo_check",
        ]
    );
    for commented in [
        "auth_validation_public_key_path",
        "max_open_files",
        "page_service_max_connections",
        "http_max_connections",
        "remote_storage",
        "disk_usage_based_eviction",
    ] {
        assert!(text.contains(&format!("# {commented} = ")), "{commented}");
    }
    assert_eq!(ConfigToml::from_table(table).unwrap(), ConfigToml::default());
}

#[test]
fn http_jwt_auth_loads_the_shared_key() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("auth_public_key.pem"), TEST_PUBLIC_KEY).unwrap();
    let key = "auth_validation_public_key_path=\"auth_public_key.pem\"".to_string();
    let conf = PageServerConf::load(dir.path(), None, std::slice::from_ref(&key)).unwrap();
    assert!(conf.http.auth.is_none(), "trust is the default");
    assert_eq!(conf.http.auth_open_routes, ["/v1/status", "/metrics"]);
    let overrides =
        [key, "http_auth_type=\"jwt\"".to_string(), "http_auth_open_routes=[]".to_string()];
    let conf = PageServerConf::load(dir.path(), None, &overrides).unwrap();
    assert!(conf.http.auth.is_some());
    assert!(conf.http.auth_open_routes.is_empty());
    assert_eq!(conf.pg_auth_type, AuthType::Trust, "the page service keeps its own setting");
    std::fs::write(dir.path().join("auth_public_key.pem"), "not a key").unwrap();
    let err = PageServerConf::load(dir.path(), None, &overrides).unwrap_err().to_string();
    assert!(err.contains("`auth_validation_public_key_path`"), "{err}");
}

#[test]
fn unparseable_jwt_key_names_its_key() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bad.pem"), "not a key").unwrap();
    let err = PageServerConf::load(
        dir.path(),
        None,
        &[
            "pg_auth_type=\"jwt\"".to_string(),
            "auth_validation_public_key_path=\"bad.pem\"".to_string(),
        ],
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("`auth_validation_public_key_path`"), "{err}");
}

#[test]
fn descriptor_limits_fit_the_process_limit() {
    let limit = super::fd_budget::nofile_soft_limit();
    let conf = load(&[]).unwrap();
    assert!(conf.io_engine.open_file_count() == 0);
    let b = conf.fd_budget;
    assert!(b.max_open_files + b.page_service_max_connections + b.http_max_connections <= limit);
    let err = err_naming(&["max_open_files=0"], "max_open_files");
    assert!(err.contains("greater than 0"), "{err}");
    err_naming(&["page_service_max_connections=0"], "page_service_max_connections");
    if limit < usize::MAX / 4 {
        let err = err_naming(&[&format!("max_open_files={limit}")], "max_open_files");
        assert!(err.contains("RLIMIT_NOFILE"), "{err}");
    }
    let conf = load(&["max_open_files=8", "page_service_max_connections=3"]).unwrap();
    assert_eq!(conf.page_service_conf().max_connections, 3);
}

#[test]
fn page_service_threads_default_to_one_per_cpu() {
    let cpus = std::thread::available_parallelism().unwrap();
    assert_eq!(load(&[]).unwrap().page_service_conf().threads, cpus.get());
    assert_eq!(load(&["page_service_threads=3"]).unwrap().page_service_conf().threads, 3);
    // 0: connections are served on the daemon's runtime.
    assert_eq!(load(&["page_service_threads=0"]).unwrap().page_service_conf().threads, 0);
    err_naming(&["page_service_threads=-1"], "page_service_threads");
}

#[test]
fn client_limits_and_timeouts() {
    let conf = load(&[]).unwrap();
    assert_eq!(conf.authentication_timeout, Duration::from_secs(10));
    assert_eq!(conf.http.header_read_timeout, Duration::from_secs(10));
    assert_eq!(conf.http.body_read_timeout, Duration::from_secs(60));
    assert_eq!(conf.http.max_concurrent_requests, 64);
    for key in ["authentication_timeout", "http_header_read_timeout", "http_body_read_timeout"] {
        err_naming(&[&format!("{key}=\"0s\"")], key);
        err_naming(&[&format!("{key}=\"soon\"")], key);
    }
    err_naming(&["http_max_concurrent_requests=0"], "http_max_concurrent_requests");
    let conf = load(&["authentication_timeout=\"250ms\"", "http_max_connections=7"]).unwrap();
    assert_eq!(conf.page_service_conf().authentication_timeout, Duration::from_millis(250));
    assert_eq!(conf.http.max_connections, 7);
}

#[test]
fn serial_pipelining_refuses_unknown_fields() {
    let err = err_naming(
        &["page_service_pipelining={mode=\"serial\", max_batch_size=4}"],
        "page_service_pipelining",
    );
    assert!(err.contains("max_batch_size"), "{err}");
    load(&["page_service_pipelining={mode=\"serial\"}"]).unwrap();
}

#[test]
fn config_file_must_be_a_bounded_regular_file() {
    let dir = tempfile::tempdir().unwrap();
    let load_file = |path: &Path| PageServerConf::load(dir.path(), Some(path), &[]);
    let err = load_file(Path::new("/dev/zero")).unwrap_err().to_string();
    assert!(err.contains("/dev/zero") && err.contains("not a regular file"), "{err}");
    let err = load_file(dir.path()).unwrap_err().to_string();
    assert!(err.contains("not a regular file"), "{err}");
    let big = dir.path().join("big.toml");
    std::fs::write(&big, "#".repeat(MAX_CONFIG_FILE_BYTES as usize + 1)).unwrap();
    let err = load_file(&big).unwrap_err().to_string();
    assert!(err.contains("big.toml") && err.contains("bytes"), "{err}");
    let ok = dir.path().join("ok.toml");
    std::fs::write(&ok, "wait_lsn_timeout = \"5 s\"\n").unwrap();
    assert_eq!(load_file(&ok).unwrap().wait_lsn_timeout, Duration::from_secs(5));
}

#[test]
fn lsn_lease_length_reaches_the_storage_conf() {
    let conf = load(&[]).unwrap();
    assert_eq!(conf.storage_conf().lsn_lease_length, Duration::from_secs(600));
    let conf = load(&["lsn_lease_length=\"90 s\""]).unwrap();
    assert_eq!(conf.storage_conf().lsn_lease_length, Duration::from_secs(90));
    err_naming(&["lsn_lease_length=\"0s\""], "lsn_lease_length");
    err_naming(&["lsn_lease_length=\"forever\""], "lsn_lease_length");
}

#[test]
fn compaction_settings_reach_the_storage_conf_in_order() {
    let conf = load(&[]).unwrap().storage_conf();
    let d = crate::tenant::CompactionConf::defaults();
    let c = &conf.compaction;
    assert_eq!(
        (c.compaction_threshold, c.compaction_target_size, c.compaction_period),
        (d.compaction_threshold, d.compaction_target_size, d.compaction_period)
    );
    assert_eq!(
        (c.image_creation_threshold, c.l0_flush_delay_threshold, c.l0_flush_stall_threshold),
        (d.image_creation_threshold, d.l0_flush_delay_threshold, d.l0_flush_stall_threshold)
    );
    assert_eq!(c.max_record_chain, d.max_record_chain);
    assert_eq!(
        (c.gc_horizon, c.pitr_interval, c.gc_period),
        (d.gc_horizon, d.pitr_interval, d.gc_period)
    );
    assert_eq!(conf.layer_index_cache_size, 64 * 1024 * 1024);
    let conf = load(&["compaction_threshold=3", "pitr_interval=\"0s\"", "gc_horizon=\"1 MiB\""])
        .unwrap()
        .storage_conf();
    assert_eq!(conf.compaction.compaction_threshold, 3);
    assert_eq!(conf.compaction.pitr_interval, Duration::ZERO);
    assert_eq!(conf.compaction.gc_horizon, 1024 * 1024);
    err_naming(&["compaction_threshold=1"], "compaction_threshold");
    err_naming(&["compaction_target_size=0"], "compaction_target_size");
    err_naming(&["image_creation_threshold=0"], "image_creation_threshold");
    err_naming(&["max_record_chain=0"], "max_record_chain");
    err_naming(&["layer_index_cache_size=0"], "layer_index_cache_size");
    let err = err_naming(&["l0_flush_delay_threshold=10"], "l0_flush_delay_threshold");
    assert!(err.contains("compaction_threshold"), "{err}");
    err_naming(&["l0_flush_stall_threshold=20"], "l0_flush_stall_threshold");
    err_naming(&["gc_period=\"often\""], "gc_period");
}

#[test]
fn remote_storage_is_connected_once_and_reaches_the_storage_conf() {
    let dir = tempfile::tempdir().unwrap();
    let remote = dir.path().join("remote");
    let local = format!("remote_storage={{local_path={:?}}}", remote.display().to_string());
    let conf = load(&[&local]).unwrap();
    let rs = conf.remote_storage.clone().expect("configured");
    assert!(remote.is_dir(), "the local directory is created");
    assert!(rs.describe().contains(&remote.display().to_string()), "{}", rs.describe());
    // The config, its clones and the storage engine share the one connection.
    let storage = conf.clone().storage_conf();
    assert!(Arc::ptr_eq(storage.remote_storage.as_ref().unwrap(), &rs));

    let s3 = r#"remote_storage={endpoint="http://127.0.0.1:9000", bucket="ps", prefix="p/", region="us-east-1"}"#;
    let conf = load(&[s3]).unwrap();
    let rs = conf.remote_storage.unwrap();
    assert_eq!(rs.describe(), "S3 bucket ps at http://127.0.0.1:9000");
    assert_eq!(rs.conf().prefix, "p");
    assert_eq!(format!("{rs:?}"), "RemoteStorage(S3 bucket ps at http://127.0.0.1:9000)");
}

#[test]
fn remote_storage_errors_name_the_key() {
    let msg = err_naming(&["remote_storage={prefix=\"p\"}"], "remote_storage");
    assert!(msg.contains("give local_path"), "{msg}");
    let msg = err_naming(&["remote_storage={local_path=\"/x\", bucket=\"b\"}"], "remote_storage");
    assert!(msg.contains("either local_path or bucket"), "{msg}");
    let msg = err_naming(&["remote_storage={local_path=\"rel\"}"], "remote_storage");
    assert!(msg.contains("absolute"), "{msg}");
    let msg =
        err_naming(&["remote_storage={bucket=\"b\", endpoint=\"minio:9000\"}"], "remote_storage");
    assert!(msg.contains("http://"), "{msg}");
    // Credentials are never read from the config: the key is unknown.
    let msg =
        err_naming(&["remote_storage={bucket=\"b\", access_key_id=\"AKIA\"}"], "remote_storage");
    assert!(msg.contains("access_key_id"), "{msg}");
    err_naming(&["remote_storage=\"s3://bucket\""], "remote_storage");
}

#[test]
fn eviction_settings_reach_the_storage_conf() {
    let dir = tempfile::tempdir().unwrap();
    let remote = format!("remote_storage={{local_path={:?}}}", dir.path().display().to_string());
    let full = r#"disk_usage_based_eviction={max_resident_bytes="10 GiB", min_avail_bytes="1 GiB", period="30 s"}"#;
    let e = load(&[&remote, full]).unwrap().storage_conf().eviction;
    assert_eq!(e.max_resident_bytes, Some(10 << 30));
    assert_eq!(e.min_avail_bytes, Some(1 << 30));
    assert_eq!(e.period, Duration::from_secs(30));
    let e = load(&[&remote, "disk_usage_based_eviction={min_avail_bytes=4096}"]).unwrap().eviction;
    assert_eq!((e.max_resident_bytes, e.min_avail_bytes), (None, Some(4096)));
    assert_eq!(e.period, Duration::from_secs(10), "the default period");

    let msg = err_naming(&[full], "disk_usage_based_eviction");
    assert!(msg.contains("needs remote_storage"), "{msg}");
    let msg = err_naming(&[&remote, "disk_usage_based_eviction={}"], "disk_usage_based_eviction");
    assert!(msg.contains("max_resident_bytes or min_avail_bytes"), "{msg}");
    let zero = r#"disk_usage_based_eviction={min_avail_bytes="1 GiB", period="0 s"}"#;
    let msg = err_naming(&[&remote, zero], "disk_usage_based_eviction");
    assert!(msg.contains("period"), "{msg}");
    let lots = r#"disk_usage_based_eviction={max_resident_bytes="lots"}"#;
    let msg = err_naming(&[&remote, lots], "disk_usage_based_eviction");
    assert!(msg.contains("256 MiB"), "{msg}");
    let msg =
        err_naming(&[&remote, "disk_usage_based_eviction={bogus=1}"], "disk_usage_based_eviction");
    assert!(msg.contains("bogus"), "{msg}");
}

/// The benchmark floor serves wrong data by design: a production build
/// refuses the key, naming it; a testing build accepts it.
#[test]
fn constant_pages_only_in_testing_builds() {
    let key = "page_service_constant_pages=true";
    if cfg!(feature = "testing") {
        assert!(load(&[key]).unwrap().page_service_constant_pages);
    } else {
        err_naming(&[key], "page_service_constant_pages");
    }
    assert!(!load(&[]).unwrap().page_service_constant_pages);
}
