//! Going on to the next PostgreSQL timeline within a session.
//!
//! A server ends the stream of a timeline (CopyDone, then a row with the
//! next TLI and the LSN where it starts) when that timeline is historic on
//! it: a standby was promoted (it is the server, or, cascading, the server
//! followed its upstream's promotion), or the stream was started on an
//! older TLI. The session then, on the same connection, without a new
//! daemon timeline, a gap or a reconnect:
//! 1. fetches the next TLI's history (`TIMELINE_HISTORY`): it must end
//!    the old TLI at the switch LSN;
//! 2. compares it with the timeline's, as at the start of a session
//!    (`history::check`): `last_record_lsn` past the switch is a
//!    divergence;
//! 3. checks that the decoder was fed up to the switch LSN exactly: a
//!    cascading walsender may have sent the start of a record its standby
//!    had received but never completed before it was promoted; when
//!    `last_record_lsn` is the switch LSN those bytes are dropped (the
//!    decoder starts again there), anything else is an error (retried);
//! 4. records the history durably (`wal_source.json`, remote index) before
//!    any WAL of the new TLI is ingested, so a restart resumes on the
//!    right TLI (step 2 does it);
//! 5. gives it to the decoder (page headers from the switch on carry the
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
    let fed = decoder.fed_lsn();
    if fed > switch_lsn && last == switch_lsn {
        info!(
            "dropping {} bytes of PostgreSQL timeline {old_tli} past its end at {switch_lsn}: \
             the start of a record its server never completed",
            fed.0 - switch_lsn.0
        );
        decoder.restart_at(switch_lsn);
    } else if fed != switch_lsn {
        bail!(
            "the server ended PostgreSQL timeline {old_tli} at {switch_lsn} (timeline \
             {next_tli} begins there), but sent its WAL up to {fed}, and {last} is ingested"
        );
    }
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
