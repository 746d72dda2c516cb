//! One benchmark connection: connect, then keep `queue_depth` GetPage requests
//! in flight until cancelled; reconnect with backoff when the connection
//! breaks. Errors are counted in the statistics, never propagated as panics.
//!
//! Per session two futures run joined in one task:
//! - the writer takes a permit from a semaphore of `queue_depth` permits per
//!   request, records the request in the in-flight FIFO *before* writing it (so
//!   its response can never arrive first) and writes every request it has
//!   permits for in one socket write;
//! - the reader parses responses, pops the FIFO front for each, checks that the
//!   response answers that request (v3: reqid, LSNs, rel and block echoed;
//!   v2: response kind), records the latency and returns the permit.
//!
//! On cancellation the writer stops issuing, waits until all permits are back
//! (every response received, bounded by `DRAIN_TIMEOUT`), sends Terminate and
//! tells the reader to stop. If either side fails, the joined future drops the
//! other; requests still in the FIFO are counted as connection errors.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::BytesMut;
use pageserver_api::pagestream::{
    PagestreamBeMessage, PagestreamFeMessage, PagestreamGetPageRequest, PagestreamProtocolVersion,
    PagestreamRequest,
};
use pageserver_api::reltag::RelTag;
use pq_proto::client::{put_copy_data_with, read_backend, terminate_message, BackendMessage};
use pq_proto::ConnString;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::warn;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use crate::keyspace::RelBlockSpace;
use crate::pagestream_conn::{connect_pagestream, Protocol, DRAIN_TIMEOUT};
use crate::stats::{LiveCounters, RequestStats};

const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// Error responses logged per connection before going quiet (all are counted).
const MAX_LOGGED_ERRORS: u32 = 5;

pub struct ClientParams {
    pub connstring: Arc<ConnString>,
    pub tenant: TenantId,
    pub timeline: TimelineId,
    pub protocol: Protocol,
    pub queue_depth: usize,
    pub per_client_rate: Option<f64>,
    pub req_latest_probability: f64,
    pub at_lsn: Lsn,
    pub space: Arc<RelBlockSpace>,
    pub seed: u64,
}

/// What a request was, kept until its response arrives.
struct InFlight {
    reqid: u64,
    request_lsn: Lsn,
    not_modified_since: Lsn,
    rel: RelTag,
    blkno: u32,
    sent_at: Instant,
}

/// Request generation state that survives reconnects.
struct Generator {
    rng: StdRng,
    next_reqid: u64,
}

pub async fn run_client(
    params: ClientParams,
    cancel: CancellationToken,
    live: Arc<LiveCounters>,
) -> RequestStats {
    let mut stats = RequestStats::default();
    let mut gen = Generator { rng: StdRng::seed_from_u64(params.seed), next_reqid: 1 };
    let mut backoff = MIN_BACKOFF;
    while !cancel.is_cancelled() {
        let connected = tokio::select! {
            r = connect_pagestream(&params.connstring, params.tenant, params.timeline, params.protocol) => r,
            _ = cancel.cancelled() => break,
        };
        let outcome: anyhow::Result<()> = match connected {
            Ok((stream, leftover)) => {
                backoff = MIN_BACKOFF;
                let (rd, wr) = stream.into_split();
                let res =
                    run_session(&params, rd, wr, leftover, &cancel, &mut stats, &live, &mut gen)
                        .await;
                match res {
                    Ok(()) => break,
                    Err(e) => Err(e.context("connection failed")),
                }
            }
            Err(e) => {
                stats.connect_failures += 1;
                live.errors.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
        };
        if let Err(e) = outcome {
            warn!("{}/{}: {e:#}; retrying in {backoff:?}", params.tenant, params.timeline);
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = cancel.cancelled() => break,
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
    stats
}

fn protocol_version(p: Protocol) -> PagestreamProtocolVersion {
    match p {
        Protocol::V2 => PagestreamProtocolVersion::V2,
        Protocol::V3 => PagestreamProtocolVersion::V3,
    }
}

#[allow(clippy::too_many_arguments)]
async fn run_session(
    p: &ClientParams,
    mut rd: OwnedReadHalf,
    mut wr: OwnedWriteHalf,
    mut buf: BytesMut,
    cancel: &CancellationToken,
    stats: &mut RequestStats,
    live: &LiveCounters,
    gen: &mut Generator,
) -> anyhow::Result<()> {
    let version = protocol_version(p.protocol);
    let inflight: Mutex<VecDeque<InFlight>> = Mutex::new(VecDeque::with_capacity(p.queue_depth));
    let permits = Semaphore::new(p.queue_depth);
    let all_answered = CancellationToken::new();
    let period = p.per_client_rate.map(|r| Duration::from_secs_f64(1.0 / r));

    let writer = async {
        let mut out = BytesMut::with_capacity(64 * p.queue_depth);
        let mut next_at = tokio::time::Instant::now();
        loop {
            let permit = tokio::select! {
                biased;
                _ = cancel.cancelled() => break,
                permit = permits.acquire() => permit.context("semaphore closed")?,
            };
            permit.forget();
            let mut n = 1;
            match period {
                None => {
                    let extra = permits.available_permits();
                    if extra > 0 {
                        if let Ok(more) = permits.try_acquire_many(extra as u32) {
                            more.forget();
                            n += extra;
                        }
                    }
                }
                Some(period) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(next_at) => {}
                        _ = cancel.cancelled() => { permits.add_permits(1); break }
                    }
                    let now = tokio::time::Instant::now();
                    // Catch up after a stall, but never by more than a second's burst.
                    let floor = now.checked_sub(Duration::from_secs(1)).unwrap_or(now);
                    next_at = (next_at + period).max(floor);
                }
            }
            out.clear();
            {
                let now = Instant::now();
                let mut q = inflight.lock().unwrap();
                for _ in 0..n {
                    let (rel, blkno) = p.space.sample(&mut gen.rng);
                    let request_lsn = if gen.rng.gen_bool(p.req_latest_probability) {
                        Lsn::MAX
                    } else {
                        p.at_lsn
                    };
                    let req = PagestreamGetPageRequest {
                        hdr: PagestreamRequest {
                            reqid: gen.next_reqid,
                            request_lsn,
                            not_modified_since: p.at_lsn,
                        },
                        rel,
                        blkno,
                    };
                    gen.next_reqid += 1;
                    let msg = PagestreamFeMessage::GetPage(req);
                    put_copy_data_with(&mut out, |buf| msg.serialize_into(buf, version));
                    q.push_back(InFlight {
                        reqid: req.hdr.reqid,
                        request_lsn,
                        not_modified_since: p.at_lsn,
                        rel,
                        blkno,
                        sent_at: now,
                    });
                }
            }
            wr.write_all(&out).await.context("send requests")?;
        }
        // Drain: every permit back means every response has been read.
        match tokio::time::timeout(DRAIN_TIMEOUT, permits.acquire_many(p.queue_depth as u32)).await
        {
            Ok(all) => all.context("semaphore closed")?.forget(),
            Err(_) => {
                bail!("responses still outstanding {DRAIN_TIMEOUT:?} after the end of the run")
            }
        }
        wr.write_all(&terminate_message()).await.context("send Terminate")?;
        let _ = wr.shutdown().await;
        all_answered.cancel();
        anyhow::Ok(())
    };

    let reader = async {
        let mut logged_errors = 0u32;
        loop {
            let msg = tokio::select! {
                biased;
                m = read_backend(&mut rd, &mut buf) => m?,
                _ = all_answered.cancelled() => return anyhow::Ok(()),
            };
            let body = match msg {
                None => bail!("server closed the connection"),
                Some(BackendMessage::CopyData(body)) => body,
                Some(BackendMessage::NoticeResponse(_)) => continue,
                Some(BackendMessage::ErrorResponse(e)) => bail!("server ended the stream: {e}"),
                Some(_) => bail!("unexpected libpq message in the pagestream"),
            };
            let req = inflight.lock().unwrap().pop_front();
            let Some(req) = req else { bail!("response without an outstanding request") };
            match check_response(body, version, &req) {
                Ok(Outcome::Page) => {
                    let latency = req.sent_at.elapsed();
                    stats.ok += 1;
                    stats.record_latency(latency);
                    live.completed.fetch_add(1, Ordering::Relaxed);
                    live.latency_sum_us.fetch_add(latency.as_micros() as u64, Ordering::Relaxed);
                }
                Ok(Outcome::Error(message)) => {
                    stats.error_responses += 1;
                    live.errors.fetch_add(1, Ordering::Relaxed);
                    if logged_errors < MAX_LOGGED_ERRORS {
                        logged_errors += 1;
                        warn!(
                            "error response to GetPage {} blk {} at {}: {message}",
                            req.rel, req.blkno, req.request_lsn
                        );
                    }
                }
                Err(e) => {
                    // The FIFO pairing is broken: this request and the rest are lost.
                    stats.connection_errors += 1;
                    live.errors.fetch_add(1, Ordering::Relaxed);
                    return Err(e);
                }
            }
            permits.add_permits(1);
        }
    };

    let res = tokio::try_join!(writer, reader).map(|_| ());
    let lost = inflight.lock().unwrap().len() as u64;
    if res.is_err() && lost > 0 {
        stats.connection_errors += lost;
        live.errors.fetch_add(lost, Ordering::Relaxed);
    }
    res
}

enum Outcome {
    Page,
    Error(String),
}

/// Decodes one response and checks that it answers `req`.
fn check_response(
    payload: bytes::Bytes,
    version: PagestreamProtocolVersion,
    req: &InFlight,
) -> anyhow::Result<Outcome> {
    let msg = PagestreamBeMessage::deserialize(payload, version)
        .context("undecodable pagestream response")?;
    let check_hdr = |hdr: &PagestreamRequest| -> anyhow::Result<()> {
        if version == PagestreamProtocolVersion::V3
            && (hdr.reqid != req.reqid
                || hdr.request_lsn != req.request_lsn
                || hdr.not_modified_since != req.not_modified_since)
        {
            bail!(
                "response echo (reqid {}, lsn {}, not_modified_since {}) does not match \
                 request (reqid {}, lsn {}, not_modified_since {})",
                hdr.reqid,
                hdr.request_lsn,
                hdr.not_modified_since,
                req.reqid,
                req.request_lsn,
                req.not_modified_since
            );
        }
        Ok(())
    };
    match msg {
        PagestreamBeMessage::GetPage(resp) => {
            check_hdr(&resp.req.hdr)?;
            if version == PagestreamProtocolVersion::V3
                && (resp.req.rel != req.rel || resp.req.blkno != req.blkno)
            {
                bail!(
                    "response for {} blk {} answers request for {} blk {}",
                    resp.req.rel,
                    resp.req.blkno,
                    req.rel,
                    req.blkno
                );
            }
            Ok(Outcome::Page)
        }
        PagestreamBeMessage::Error(err) => {
            check_hdr(&err.req)?;
            Ok(Outcome::Error(err.message))
        }
        other => bail!("unexpected response kind to GetPage: {other:?}"),
    }
}
