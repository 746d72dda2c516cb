//! Crash tests: the real daemon binary is killed (failpoint action `exit`,
//! equivalent to `kill -9`) at each step of a layer flush, then restarted.
//! After restart no temp or ephemeral file remains, and everything that was
//! acknowledged durable (a checkpoint returned) reads back byte for byte.
//!
//! Needs the `testing` feature (failpoints and the test ingest endpoints):
//! `cargo test -p pageserver --features testing --test crash`.
#![cfg(feature = "testing")]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const FLUSH_STEPS: &[&str] = &[
    "flush::before-write-layer",
    "flush::before-fsync",
    "flush::before-rename",
    "flush::after-rename",
    "flush::before-metadata",
    "flush::after-metadata",
];

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

struct Daemon {
    child: Child,
    http: String,
    workdir: PathBuf,
    pg_port: u16,
    http_port: u16,
}

impl Daemon {
    fn start(workdir: &Path, pg_port: u16, http_port: u16) -> Daemon {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(workdir.join("daemon.log"))
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_pageserver"))
            .arg("--workdir")
            .arg(workdir.join("data"))
            .args(["-c", &format!("listen_pg_addr='127.0.0.1:{pg_port}'")])
            .args(["-c", &format!("listen_http_addr='127.0.0.1:{http_port}'")])
            .args(["-c", "checkpoint_distance='1 MiB'"])
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start pageserver");
        let d = Daemon {
            child,
            http: format!("http://127.0.0.1:{http_port}"),
            workdir: workdir.into(),
            pg_port,
            http_port,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while reqwest::blocking::get(format!("{}/v1/status", d.http))
            .map(|r| !r.status().is_success())
            .unwrap_or(true)
        {
            assert!(
                Instant::now() < deadline,
                "daemon did not come up; see {}/daemon.log",
                workdir.display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        d
    }

    fn restart(mut self) -> Daemon {
        let _ = self.child.kill();
        let _ = self.child.wait();
        Daemon::start(&self.workdir, self.pg_port, self.http_port)
    }

    fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Value,
    ) -> reqwest::Result<reqwest::blocking::Response> {
        reqwest::blocking::Client::new()
            .request(method, format!("{}{path}", self.http))
            .timeout(Duration::from_secs(60))
            .json(&body)
            .send()
    }

    fn ok(&self, method: reqwest::Method, path: &str, body: Value) -> Value {
        let r = self.call(method, path, body).unwrap();
        let status = r.status();
        let text = r.text().unwrap();
        assert!(status.is_success(), "{path}: {status} {text}");
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn key(i: u32) -> String {
    format!("000000067F00000005000040{:02X}00{:08X}", i / 1000 % 256, i % 1000)
}

fn page(i: u32, lsn: u64) -> String {
    let b: Vec<u8> = (0..8192u32).map(|j| (i.wrapping_mul(31) ^ j ^ lsn as u32) as u8).collect();
    hex::encode(b)
}

fn lsn_str(l: u64) -> String {
    format!("{:X}/{:X}", l >> 32, l & 0xffff_ffff)
}

fn parse_lsn(s: &str) -> u64 {
    let (hi, lo) = s.split_once('/').unwrap();
    (u64::from_str_radix(hi, 16).unwrap() << 32) | u64::from_str_radix(lo, 16).unwrap()
}

/// Writes batches of pages through the test ingest endpoint and remembers
/// (key index, LSN) of each.
struct Writer {
    tl_path: String,
    written: Vec<(u32, u64)>,
    lsn: u64,
    next_key: u32,
}

impl Writer {
    fn ingest(&mut self, d: &Daemon, batches: usize) {
        for _ in 0..batches {
            self.lsn += 0x100;
            let values: Vec<Value> = (0..40)
                .map(|n| {
                    let i = (self.next_key + n) % 3000;
                    self.written.push((i, self.lsn));
                    json!({ "key": key(i), "image": page(i, self.lsn) })
                })
                .collect();
            self.next_key += 40;
            let body = json!({ "lsn": lsn_str(self.lsn), "values": values });
            d.ok(reqwest::Method::POST, &format!("{}/testing/ingest", self.tl_path), body);
        }
    }
}

#[test]
fn kill_at_every_flush_step_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), free_port(), free_port());
    let tenant = hex::encode(rand::random::<[u8; 16]>());
    let timeline = hex::encode(rand::random::<[u8; 16]>());
    d.ok(reqwest::Method::POST, "/v1/tenant", json!({ "new_tenant_id": tenant }));
    d.ok(
        reqwest::Method::POST,
        &format!("/v1/tenant/{tenant}/timeline"),
        json!({ "new_timeline_id": timeline, "initial_lsn": "0/100" }),
    );
    let tl_path = format!("/v1/tenant/{tenant}/timeline/{timeline}");

    let mut w = Writer { tl_path: tl_path.clone(), written: Vec::new(), lsn: 0x100, next_key: 0 };
    for step in FLUSH_STEPS {
        w.ingest(&d, 3);
        let acked = parse_lsn(
            d.ok(reqwest::Method::PUT, &format!("{tl_path}/checkpoint"), Value::Null)
                ["disk_consistent_lsn"]
                .as_str()
                .unwrap(),
        );
        w.ingest(&d, 3);
        d.ok(reqwest::Method::PUT, "/v1/failpoints", json!([{ "name": step, "actions": "exit" }]));
        let res = d.call(reqwest::Method::PUT, &format!("{tl_path}/checkpoint"), Value::Null);
        assert!(
            res.is_err() || !res.unwrap().status().is_success(),
            "{step}: checkpoint should have died"
        );
        let status = d.child.wait().unwrap();
        assert!(!status.success(), "{step}: daemon exited by the failpoint");

        d = d.restart();
        let info = d.ok(reqwest::Method::GET, &tl_path, Value::Null);
        let dc = parse_lsn(info["disk_consistent_lsn"].as_str().unwrap());
        let last = parse_lsn(info["last_record_lsn"].as_str().unwrap());
        assert!(
            dc >= acked,
            "{step}: disk_consistent_lsn {dc:X} went below acknowledged {acked:X}"
        );
        assert_eq!(dc, last, "{step}: restart resumes at disk_consistent_lsn");
        if *step == "flush::after-metadata" {
            assert!(dc > acked, "{step}: the metadata was written before the crash");
        }

        // No temp or ephemeral file is left behind.
        let tl_dir =
            dir.path().join("data/tenants").join(&tenant).join("timelines").join(&timeline);
        for e in std::fs::read_dir(&tl_dir).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            assert!(
                !name.ends_with(".___temp") && !name.starts_with("ephemeral-"),
                "{step}: leftover {name}"
            );
        }

        // Everything durable reads back: the newest version of each key at `dc`.
        w.written.retain(|(_, l)| *l <= dc);
        let mut newest = std::collections::BTreeMap::new();
        for (i, l) in &w.written {
            newest.insert(*i, *l);
        }
        for (i, l) in newest.iter().step_by(7) {
            let r = d.ok(
                reqwest::Method::GET,
                &format!("{tl_path}/testing/get?key={}&lsn={}", key(*i), lsn_str(dc)),
                Value::Null,
            );
            assert_eq!(
                r["value"].as_str().unwrap(),
                page(*i, *l),
                "{step}: key {i} written at {l:X}"
            );
        }
    }
}
