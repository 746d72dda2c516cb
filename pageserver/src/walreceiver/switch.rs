//! Going on to the next PostgreSQL timeline within a session.
//!
//! A server ends the stream of a timeline (CopyDone, then a row with the
//! next TLI and the LSN where it starts) when that timeline is historic on
//! it: a standby was promoted (it is the server, or, cascading, the server
//! followed its upstream's promotion), or the stream was started on an
//! older TLI. The session then, on the same connection, without a new
//! daemon timeline, a gap or a reconnect:
//! 1. checks that every byte of the old TLI up to the switch LSN was fed
//!    to the decoder (the walsender sends up to the switch exactly);
//! 2. fetches the next TLI's history (`TIMELINE_HISTORY`) and compares it
//!    with the timeline's, as at the start of a session
//!    (`history::check`): it must continue the old TLI at that LSN, or the
//!    histories diverged;
//! 3. records it durably (`wal_source.json`, remote index) before any WAL
//!    of the new TLI is ingested, so a restart resumes on the right TLI;
//! 4. gives it to the decoder (page headers from the switch on carry the
//!    new TLI) and streams the new TLI from the switch LSN.

use anyhow::bail;
use postgres_ffi::wal::WalStreamDecoder;
use pq_proto::replication::ReplicationClient;
use tracing::info;
use utils::lsn::Lsn;

use super::history;
use super::session::{check_against, SessionEnd};
use crate::tenant::Timeline;

/// Steps 1 to 4 of the module comment: the TLI to stream next, or how the
/// session ends.
pub async fn next_timeline(
    tl: &Timeline,
    client: &mut ReplicationClient,
    decoder: &mut WalStreamDecoder,
    old_tli: u32,
    next_tli: u32,
    switch_lsn: Lsn,
) -> anyhow::Result<Result<u32, SessionEnd>> {
    if next_tli <= old_tli {
        bail!("the server ended PostgreSQL timeline {old_tli} and named timeline {next_tli} next");
    }
    let fed = decoder.fed_lsn();
    if fed != switch_lsn {
        bail!(
            "the server ended PostgreSQL timeline {old_tli} at {switch_lsn} (timeline \
             {next_tli} begins there), but sent its WAL up to {fed}"
        );
    }
    let next = history::fetch(client, next_tli).await?;
    if next.end_of(old_tli) != Ok(Some(switch_lsn)) {
        bail!(
            "the history of PostgreSQL timeline {next_tli} does not end timeline {old_tli} at \
             {switch_lsn}, where the server said it ended: {:?}",
            next.switches()
        );
    }
    let last = tl.get_last_record_lsn();
    let tli = match check_against(tl, &next, last).await? {
        Ok(tli) => tli,
        Err(end) => return Ok(Err(end)),
    };
    if tli != next_tli {
        bail!(
            "PostgreSQL timeline {old_tli} ended at {switch_lsn}, but the WAL ingested up to \
             {last} is on timeline {tli} of the history of timeline {next_tli}"
        );
    }
    decoder.set_timeline_history(next);
    info!(
        "PostgreSQL timeline {old_tli} ended at {switch_lsn}; going on with timeline {next_tli} \
         from there"
    );
    Ok(Ok(next_tli))
}
