//! One replication session: connect, identify, compare PostgreSQL
//! timeline histories (`history.rs`: stream from `last_record_lsn` on the
//! TLI that holds it, or end with [`SessionEnd::Diverged`]), stream,
//! ingest; when the server ends the streamed TLI, go on with the next one
//! on the same connection (`switch.rs`), keeping the decoder and ingest
//! state.
//!
//! The loop waits for whichever comes first: a message from the primary,
//! the status timer, the idle timer, the timeline's cancellation. WAL bytes
//! go into the stream decoder; every complete record is ingested at its end
//! LSN, all records of one message in one `DatadirModification` (one
//! commit, one `last_record_lsn` advance). Nothing is read from the socket
//! while a commit waits for ingest backpressure (in-memory budget, frozen
//! layers), so a fast primary is slowed by TCP, not buffered in memory.
//!
//! Before ingest, each record goes through the checks a PostgreSQL standby
//! makes (`postgres_ffi::wal::rmgr::xlog::standby_check`): a record it
//! must refuse (a `wal_level=minimal` PARAMETER_CHANGE) ends the session
//! with [`SessionEnd::Refused`] after committing the records before it,
//! so everything below its LSN stays readable; the receiver then stops
//! (`mod.rs`). `full_page_writes = off` is logged as a warning.
//!
//! Silence (`wal_receiver_timeout`, as PostgreSQL's walreceiver does it):
//! the clock restarts whenever the loop goes back to waiting after a
//! message of any kind (WAL or keepalive; time spent ingesting, e.g. under
//! backpressure, is not the primary's silence). At half the timeout the
//! receiver sends a status update asking for a reply; at the full timeout
//! the session ends with [`SessionEnd::Stalled`]. Keepalives that ask for
//! a reply get one at once. Connecting, `IDENTIFY_SYSTEM` and
//! `START_REPLICATION` are each bounded by the same timeout.

use std::fmt;
use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use postgres_ffi::wal::rmgr::xlog::{standby_check, Refusal, StandbyCheck};
use postgres_ffi::wal::TimelineHistory;
use postgres_ffi::wal::{DecodedWalRecord, WalStreamDecoder};
use postgres_ffi::PgMajorVersion;
use pq_proto::replication::{ReplicationMessage, ReplicationStream, StreamEnd, XLogData};
use tokio::time::{sleep_until, Instant as TokioInstant};
use tokio_util::sync::CancellationToken;
use utils::lsn::Lsn;

use super::history::{self, Divergence, HistoryCheck};
use super::hosts::{self, Chosen};
use super::status::StatusReporter;
use super::switch;
use super::WalReceiverConf;
use crate::metrics::walreceiver::METRICS;
use crate::pgdatadir_mapping::DatadirModification;
use crate::tenant::timeline::wal_source::WalSource;
use crate::tenant::Timeline;
use crate::walingest::WalIngest;

/// How a session ended without an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionEnd {
    /// The timeline is shutting down.
    Cancelled,
    /// The primary ended the stream (shutdown, timeline switch).
    Primary(String),
    /// WAL a standby must refuse: ingest stopped before it.
    Refused(Refused),
    /// The primary was silent for `wal_receiver_timeout`: what was waited
    /// for, and how long.
    Stalled(String),
    /// The server's history forked below `last_record_lsn`: ingest stops.
    Diverged(Divergence),
}

/// A record ingest must not go past, and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub reason: Refusal,
    /// The refused record's start: everything before it is ingested.
    pub lsn: Lsn,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (XLOG PARAMETER_CHANGE at {}); ingest stopped there, reads below it are served; \
             delete the timeline, or bootstrap a new one from a backup taken after wal_level \
             was raised",
            self.reason.message(),
            self.lsn
        )
    }
}

impl fmt::Display for SessionEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SessionEnd::Cancelled => f.write_str("timeline shutting down"),
            SessionEnd::Primary(why) => write!(f, "the primary ended the stream ({why})"),
            SessionEnd::Refused(r) => r.fmt(f),
            SessionEnd::Stalled(what) => f.write_str(what),
            SessionEnd::Diverged(d) => d.fmt(f),
        }
    }
}

/// One session; `avoid`: the host of the previous one, tried last
/// (`hosts.rs`).
pub async fn run(
    tl: &Timeline,
    source: &WalSource,
    conf: &WalReceiverConf,
    cancel: &CancellationToken,
    avoid: Option<&str>,
) -> anyhow::Result<SessionEnd> {
    set_state_unless_stalled(tl, "connecting");
    let chosen = tokio::select! {
        _ = cancel.cancelled() => return Ok(SessionEnd::Cancelled),
        c = hosts::choose(tl, source, conf, avoid) => c?,
    };
    let Chosen { mut client, addr, id, server, mut tli } = match chosen {
        Ok(chosen) => {
            hosts::log_chosen(&chosen, n_hosts(source));
            chosen
        }
        Err(end) => return Ok(end),
    };
    tl.receiver_status.lock().unwrap().host = Some(addr.clone());
    let start = tl.get_last_record_lsn();
    let version = PgMajorVersion::new(tl.pg_version)?;
    let mut decoder = WalStreamDecoder::new(start, version);
    decoder.set_system_id(source.system_id);
    decoder.set_timeline_history(server);
    let mut ingest = WalIngest::new(tl, start).await?;
    let mut checks = StandbyChecks { version, full_page_writes_off: false };
    loop {
        let from = decoder.fed_lsn();
        let started = client.start_replication(Some(&source.slot), from.0, tli);
        let Some(stream) = bounded(conf.timeout, started).await else {
            return Ok(stalled("START_REPLICATION", conf));
        };
        let mut stream = stream.with_context(|| {
            format!("START_REPLICATION SLOT {} at {from} TIMELINE {tli} on {addr}", source.slot)
        })?;
        tracing::info!(
            "streaming PostgreSQL timeline {tli} from {from} (server on timeline {} at {})",
            id.timeline,
            Lsn(id.xlogpos)
        );
        set_state(tl, "streaming");
        let mut wal = Wal { decoder: &mut decoder, ingest: &mut ingest, checks: &mut checks };
        let (next_tli, switch_lsn) =
            match stream_wal(tl, &mut stream, &mut wal, conf, cancel).await? {
                Streamed::Ended(end) => return Ok(end),
                Streamed::TimelineEnded { next_tli, switch_lsn } => (next_tli, switch_lsn),
            };
        // The stream (which borrows the client) ended: the client takes
        // commands again.
        let switched =
            switch::next_timeline(tl, &mut client, &mut decoder, tli, next_tli, switch_lsn);
        let Some(switched) = bounded(conf.timeout, switched).await else {
            return Ok(stalled("TIMELINE_HISTORY", conf));
        };
        match switched? {
            Ok(next) => tli = next,
            Err(end) => return Ok(end),
        }
    }
}

/// Compare the server's history with the timeline's below `last`: the TLI
/// to stream from, or the end of the session (diverged); an error when the
/// server is behind (retried). Records the server's history as the
/// timeline's when streaming goes on.
pub(super) async fn check_against(
    tl: &Timeline,
    server: &TimelineHistory,
    last: Lsn,
) -> anyhow::Result<Result<u32, SessionEnd>> {
    let own = tl.wal_source().map(|s| s.history()).transpose()?.flatten();
    match history::check(own.as_ref(), server, last) {
        HistoryCheck::Start { tli } => {
            record_history(tl, server).await?;
            Ok(Ok(tli))
        }
        HistoryCheck::Behind(why) => bail!(why),
        HistoryCheck::Diverged(d) => Ok(Err(SessionEnd::Diverged(d))),
    }
}

/// Persist `history` as the timeline's (durably, and in the remote index),
/// unless it is recorded already.
async fn record_history(tl: &Timeline, history: &TimelineHistory) -> anyhow::Result<()> {
    let edit = |source: &mut WalSource| {
        if source.history()?.as_ref() == Some(history) {
            return Ok(false);
        }
        source.set_history(history);
        Ok(true)
    };
    hosts::edit_source(tl, edit).await.context("record the PostgreSQL timeline history")
}

/// The stream decoder, ingest and checks: one per session, kept across
/// the streams of successive TLIs.
struct Wal<'s> {
    decoder: &'s mut WalStreamDecoder,
    ingest: &'s mut WalIngest,
    checks: &'s mut StandbyChecks,
}

/// How the stream of one TLI ended.
enum Streamed {
    Ended(SessionEnd),
    /// The server's CopyDone and next-timeline row: go on there.
    TimelineEnded {
        next_tli: u32,
        switch_lsn: Lsn,
    },
}

/// Stream and ingest until the stream ends (module comment).
async fn stream_wal(
    tl: &Timeline,
    stream: &mut ReplicationStream<'_>,
    wal: &mut Wal<'_>,
    conf: &WalReceiverConf,
    cancel: &CancellationToken,
) -> anyhow::Result<Streamed> {
    let mut status = StatusReporter::new(conf.status_interval);
    let mut idle_deadline: Option<TokioInstant> = None;
    let mut silence = Silence::new(conf.timeout);
    loop {
        let idle = async {
            match idle_deadline {
                Some(at) => sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            _ = cancel.cancelled() => {
                status.send(stream, tl, wal.decoder, false).await?;
                return Ok(Streamed::Ended(SessionEnd::Cancelled));
            }
            msg = stream.recv() => match msg.context("receive WAL")? {
                ReplicationMessage::XLogData(x) => {
                    observe(tl, x.wal_start + x.data.len() as u64, x.wal_end, x.server_time.0);
                    let got = ingest_message(tl, wal, x).await?;
                    if let Some(refused) = got.refused {
                        // What came before is durable and acknowledged, so
                        // the slot keeps only the WAL from the refusal on.
                        flush_and_report(tl, &mut status, stream, wal.decoder).await?;
                        return Ok(Streamed::Ended(SessionEnd::Refused(refused)));
                    }
                    if got.shutdown_checkpoint {
                        flush_and_report(tl, &mut status, stream, wal.decoder).await?;
                        idle_deadline = None;
                    } else {
                        idle_deadline = Some(TokioInstant::now() + conf.idle_flush_after);
                    }
                    silence.heard();
                }
                ReplicationMessage::PrimaryKeepalive(k) => {
                    observe(tl, wal.decoder.fed_lsn().0, k.wal_end, k.server_time.0);
                    if k.reply_requested {
                        status.send(stream, tl, wal.decoder, false).await?;
                    }
                    silence.heard();
                }
                ReplicationMessage::End(StreamEnd::TimelineEnded {
                    next_timeline: Some(next_tli),
                    next_timeline_start_lsn: Some(start),
                }) => {
                    let switch_lsn = Lsn(start);
                    return Ok(Streamed::TimelineEnded { next_tli, switch_lsn });
                }
                ReplicationMessage::End(end) => {
                    return Ok(Streamed::Ended(SessionEnd::Primary(format!("{end:?}"))))
                }
            },
            _ = status.tick() => status.send(stream, tl, wal.decoder, false).await?,
            _ = idle => {
                flush_and_report(tl, &mut status, stream, wal.decoder).await?;
                idle_deadline = None;
            }
            next = silence.wait() => match next {
                Quiet::AskForReply => status.send(stream, tl, wal.decoder, true).await?,
                Quiet::Stalled(for_) => {
                    return Ok(Streamed::Ended(SessionEnd::Stalled(format!(
                        "no message from the primary for {} ms while streaming",
                        for_.as_millis()
                    ))))
                }
            },
        }
    }
}

/// The number of hosts of `source` (1 when it cannot be parsed).
fn n_hosts(source: &WalSource) -> usize {
    source.host_list().map(|l| l.hosts.len()).unwrap_or(1)
}

/// `fut`, or `None` if it takes longer than `timeout` (never, without one).
pub(super) async fn bounded<T>(
    timeout: Option<Duration>,
    fut: impl Future<Output = T>,
) -> Option<T> {
    match timeout {
        Some(t) => tokio::time::timeout(t, fut).await.ok(),
        None => Some(fut.await),
    }
}

/// A step before streaming took longer than `wal_receiver_timeout`.
pub(super) fn stalled(step: &str, conf: &WalReceiverConf) -> SessionEnd {
    let ms = conf.timeout.map_or(0, |t| t.as_millis());
    SessionEnd::Stalled(format!("no answer from the primary to {step} within {ms} ms"))
}

/// The primary's silence while streaming, against `wal_receiver_timeout`.
struct Silence {
    timeout: Option<Duration>,
    /// When the loop went back to waiting after the latest message.
    since: TokioInstant,
    /// A status update asking for a reply was sent during this silence.
    asked: bool,
}

/// What a silence that lasted long enough calls for.
enum Quiet {
    /// Half the timeout: ask the primary for a reply.
    AskForReply,
    /// The whole timeout: give up on this connection.
    Stalled(Duration),
}

impl Silence {
    fn new(timeout: Option<Duration>) -> Silence {
        Silence { timeout, since: TokioInstant::now(), asked: false }
    }

    /// A message came (and was handled): the silence starts again.
    fn heard(&mut self) {
        self.since = TokioInstant::now();
        self.asked = false;
    }

    /// Completes at the next step of this silence; never without a
    /// timeout. Cancel-safe (it only sleeps).
    async fn wait(&mut self) -> Quiet {
        let Some(timeout) = self.timeout else { return std::future::pending().await };
        if !self.asked {
            sleep_until(self.since + timeout / 2).await;
            self.asked = true;
            return Quiet::AskForReply;
        }
        sleep_until(self.since + timeout).await;
        Quiet::Stalled(self.since.elapsed())
    }
}

pub fn set_state(tl: &Timeline, state: &'static str) {
    tl.receiver_status.lock().unwrap().state = state;
}

/// Set `state`, except over `stalled`: that stays until a session streams.
pub fn set_state_unless_stalled(tl: &Timeline, state: &'static str) {
    let mut status = tl.receiver_status.lock().unwrap();
    if status.state != "stalled" {
        status.state = state;
    }
}

/// Record what a message from the primary said (for the timeline API).
fn observe(tl: &Timeline, received: u64, primary_end: u64, primary_time_us: i64) {
    let mut s = tl.receiver_status.lock().unwrap();
    s.last_message_at = Some(Instant::now());
    s.received_lsn = s.received_lsn.max(Lsn(received));
    s.primary_lsn = s.primary_lsn.max(Lsn(primary_end));
    s.primary_time_us = primary_time_us;
}

/// What the records of one message were.
#[derive(Default)]
struct MessageIngested {
    /// One of them was a shutdown checkpoint.
    shutdown_checkpoint: bool,
    /// A record that must not be ingested: the ones before it are, the
    /// rest of the message is dropped.
    refused: Option<Refused>,
}

/// Feed one XLogData message and ingest every record it completes.
async fn ingest_message(
    tl: &Timeline,
    wal: &mut Wal<'_>,
    x: XLogData,
) -> anyhow::Result<MessageIngested> {
    let Wal { decoder, ingest, checks } = wal;
    if Lsn(x.wal_start) != decoder.fed_lsn() {
        bail!(
            "the primary sent WAL from {} but the stream is at {}",
            Lsn(x.wal_start),
            decoder.fed_lsn()
        );
    }
    METRICS.wal_bytes.inc_by(x.data.len() as u64);
    decoder.feed_bytes(&x.data);
    let started = Instant::now();
    let mut modification: Option<DatadirModification<'_>> = None;
    let mut out = MessageIngested::default();
    let mut last: Option<(Lsn, Lsn)> = None;
    while let Some(rec) = decoder.poll_decode()? {
        if let Some(refused) = checks.check(&rec)? {
            out.refused = Some(refused);
            break;
        }
        last = Some((rec.end_lsn, rec.lsn));
        if crate::walingest::reads_committed_state(&rec) {
            if let Some(m) = modification.take() {
                m.commit().await?;
            }
        }
        let m = match modification.as_mut() {
            None => modification.insert(tl.begin_modification(rec.end_lsn)),
            Some(m) => {
                m.set_lsn(rec.end_lsn).await?;
                m
            }
        };
        let outcome = ingest.ingest(&rec, m).await?;
        out.shutdown_checkpoint |= outcome.shutdown_checkpoint;
        METRICS.record(rec.rmid);
        if outcome.shutdown_checkpoint {
            tracing::info!("shutdown checkpoint at {}", rec.lsn);
        }
    }
    if let Some(m) = modification {
        m.commit().await?;
        METRICS.ingest_seconds.observe(started.elapsed().as_secs_f64());
    }
    if let Some((end, start)) = last {
        tl.set_last_record(end, start);
    }
    Ok(out)
}

/// The checks of a standby (`standby_check`), and what they remember.
struct StandbyChecks {
    version: PgMajorVersion,
    /// The latest `full_page_writes` seen was off.
    full_page_writes_off: bool,
}

impl StandbyChecks {
    /// `Some` for a record that must not be ingested.
    fn check(&mut self, rec: &DecodedWalRecord) -> anyhow::Result<Option<Refused>> {
        let check =
            standby_check(rec, self.version).with_context(|| format!("record at {}", rec.lsn))?;
        match check {
            Some(StandbyCheck::Refuse(reason)) => {
                return Ok(Some(Refused { reason, lsn: rec.lsn }))
            }
            Some(StandbyCheck::FullPageWritesOff) => self.full_page_writes(true, rec.lsn),
            Some(StandbyCheck::FullPageWritesOn) => self.full_page_writes(false, rec.lsn),
            None => {}
        }
        Ok(None)
    }

    /// Log when `full_page_writes` turns off, or on again (once per change
    /// per session: checkpoints repeat the setting). Off is replayable
    /// (ingest stores images and records as they come), but the first
    /// change of a page after a checkpoint then carries no image, so the
    /// page is only as good as the redo of its records; the operator should
    /// know.
    fn full_page_writes(&mut self, off: bool, lsn: Lsn) {
        let was_off = std::mem::replace(&mut self.full_page_writes_off, off);
        if off && !was_off {
            METRICS.full_page_writes_off.inc();
            tracing::warn!(
                "the primary runs with full_page_writes = off from {lsn}: the first change of \
                 a page after a checkpoint carries no image"
            );
        } else if !off && was_off {
            tracing::info!("the primary runs with full_page_writes = on again from {lsn}");
        }
    }
}

/// Make everything ingested durable, then tell the primary.
async fn flush_and_report(
    tl: &Timeline,
    status: &mut StatusReporter,
    stream: &mut ReplicationStream<'_>,
    decoder: &WalStreamDecoder,
) -> anyhow::Result<()> {
    if tl.get_disk_consistent_lsn() < tl.get_last_record_lsn() {
        tl.freeze_and_flush().await.context("flush ingested WAL")?;
    }
    status.send(stream, tl, decoder, false).await
}
