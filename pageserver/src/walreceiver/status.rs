//! Standby status updates: `write` = WAL received (fed to the decoder),
//! `flush` = `Timeline::durable_lsn` (`disk_consistent_lsn`, and with
//! remote storage no more than `remote_consistent_lsn`: the slot may
//! release WAL up to here, never beyond), `apply` = `last_record_lsn` (readable). Sent
//! at least every `status_interval`, whenever the primary asks, and after
//! every flush.

use std::time::Duration;

use postgres_ffi::wal::WalStreamDecoder;
use pq_proto::replication::ReplicationStream;
use tokio::time::{interval, Interval, MissedTickBehavior};

use crate::tenant::Timeline;

pub struct StatusReporter {
    timer: Interval,
}

impl StatusReporter {
    pub fn new(every: Duration) -> StatusReporter {
        let mut timer = interval(every);
        timer.set_missed_tick_behavior(MissedTickBehavior::Delay);
        StatusReporter { timer }
    }

    /// Completes when the next periodic update is due. Cancel-safe.
    pub async fn tick(&mut self) {
        self.timer.tick().await;
    }

    pub async fn send(
        &mut self,
        stream: &mut ReplicationStream<'_>,
        tl: &Timeline,
        decoder: &WalStreamDecoder,
        reply_requested: bool,
    ) -> anyhow::Result<()> {
        let write = decoder.fed_lsn();
        let flush = tl.durable_lsn();
        let apply = tl.get_last_record_lsn();
        debug_assert!(flush <= apply && apply <= write, "{flush} <= {apply} <= {write}");
        stream.send_standby_status(write.0, flush.0, apply.0, reply_requested).await?;
        tl.receiver_status.lock().unwrap().reported = [write, flush, apply];
        self.timer.reset();
        Ok(())
    }
}
