//! The CopyBoth stream of `START_REPLICATION ... PHYSICAL`: WAL and
//! keepalives from the server, standby status updates from the client.
//!
//! Server -> client CopyData (big-endian):
//! - `w` XLogData: start u64, wal_end u64, send time i64, then WAL bytes
//!   from `start` (chunks of up to 128 KiB, not aligned to records);
//! - `k` keepalive: wal_end u64, send time i64, reply-requested u8.
//!
//! Client -> server CopyData: `r` standby status: written, flushed, applied
//! (u64 each), time i64, reply-requested u8.
//!
//! How a stream ends ([`StreamEnd`]):
//! - the server sends CopyDone: the timeline ended (the server is a standby
//!   that switched, or the requested timeline is historic). The client
//!   answers CopyDone; the server then sends the next timeline and its start
//!   as a row, CommandComplete and ReadyForQuery: the client is usable
//!   again. [`ReplicationStream::stop`] starts the same exchange from the
//!   client side;
//! - the server sends CommandComplete (`COPY 0`) without CopyDone: it is
//!   shutting down after every WAL byte it sent was reported flushed (so
//!   a client that stops reporting keeps the server from stopping until
//!   `wal_sender_timeout`); the connection closes next;
//! - the connection closes at a message boundary;
//! - an ErrorResponse (e.g. `57P01` on `pg_ctl stop -m fast` before the
//!   walsender caught up) is an error carrying the server's fields.
//!
//! Concurrency: [`ReplicationStream::recv`] and
//! [`ReplicationStream::send_standby_status`] both take `&mut self` and are
//! both cancel-safe, so one task drives both with `tokio::select!`:
//! `recv()` as a branch, status updates sent from a timer branch's body.
//! A cancelled `recv` loses no message (bytes stay in the read buffer); a
//! cancelled send keeps its unsent bytes, which go out first on the next
//! send or [`ReplicationStream::flush`].

use bytes::{Buf, BufMut, Bytes};
use postgres_protocol::message::frontend;

use super::{format_lsn, parse_lsn_field, parse_num, validate_slot_name, PgTimestamp};
use crate::client::{put_copy_data_with, BackendMessage, Client, ClientError};

/// A chunk of WAL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XLogData {
    /// The LSN of `data[0]`.
    pub wal_start: u64,
    /// The server's WAL end (flushed) when it sent this.
    pub wal_end: u64,
    pub server_time: PgTimestamp,
    pub data: Bytes,
}

/// A keepalive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrimaryKeepalive {
    pub wal_end: u64,
    pub server_time: PgTimestamp,
    /// The server wants a status update now (it times the client out
    /// otherwise after `wal_sender_timeout`).
    pub reply_requested: bool,
}

/// How a replication stream ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEnd {
    /// CopyDone exchanged: the streamed timeline ended (or the client
    /// stopped). The next timeline and where it starts, if the server said.
    TimelineEnded { next_timeline: Option<u32>, next_timeline_start_lsn: Option<u64> },
    /// CommandComplete: the server shuts down; all WAL it sent is reported.
    ServerShutdown,
    /// The connection closed.
    ConnectionClosed,
}

/// One event of the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicationMessage {
    XLogData(XLogData),
    PrimaryKeepalive(PrimaryKeepalive),
    /// The stream is over; `recv` returns the same again if called again.
    End(StreamEnd),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    Streaming,
    /// CopyDone sent (or being sent): reading up to ReadyForQuery.
    Ending {
        next_timeline: Option<u32>,
        next_start: Option<u64>,
    },
    Ended(StreamEnd),
}

/// A physical replication stream; see the module comment.
pub struct ReplicationStream<'a> {
    client: &'a mut Client,
    phase: Phase,
}

impl<'a> ReplicationStream<'a> {
    pub(crate) async fn start(
        client: &'a mut Client,
        slot: Option<&str>,
        start_lsn: u64,
        timeline: u32,
    ) -> Result<ReplicationStream<'a>, ClientError> {
        let slot = match slot {
            Some(s) => {
                validate_slot_name(s)?;
                format!("SLOT {s} ")
            }
            None => String::new(),
        };
        let cmd = format!(
            "START_REPLICATION {slot}PHYSICAL {} TIMELINE {timeline}",
            format_lsn(start_lsn)
        );
        match client.start_copy(&cmd).await? {
            BackendMessage::CopyBothResponse => {
                Ok(ReplicationStream { client, phase: Phase::Streaming })
            }
            other => Err(ClientError::protocol(format!("'{cmd}' answered {other:?}"))),
        }
    }

    /// The next event. Cancel-safe.
    pub async fn recv(&mut self) -> Result<ReplicationMessage, ClientError> {
        loop {
            match &self.phase {
                Phase::Ended(end) => return Ok(ReplicationMessage::End(end.clone())),
                Phase::Ending { .. } => self.client.flush().await?,
                Phase::Streaming => {}
            }
            let Some(msg) = self.client.recv().await? else {
                self.phase = Phase::Ended(StreamEnd::ConnectionClosed);
                continue;
            };
            if let Some(event) = self.handle(msg)? {
                return Ok(event);
            }
        }
    }

    fn handle(&mut self, msg: BackendMessage) -> Result<Option<ReplicationMessage>, ClientError> {
        match (&mut self.phase, msg) {
            (Phase::Streaming, BackendMessage::CopyData(body)) => {
                return parse_copy_data(body).map(Some)
            }
            (Phase::Streaming, BackendMessage::CopyDone) => {
                frontend::copy_done(self.client.write_buf());
                self.phase = Phase::Ending { next_timeline: None, next_start: None };
            }
            (Phase::Streaming, BackendMessage::CommandComplete(_)) => {
                self.phase = Phase::Ended(StreamEnd::ServerShutdown);
            }
            // WAL still in flight after a client-initiated CopyDone; the
            // server's own CopyDone.
            (Phase::Ending { .. }, BackendMessage::CopyData(_) | BackendMessage::CopyDone) => {}
            (Phase::Ending { next_timeline, next_start }, BackendMessage::DataRow(vals)) => {
                let text = |i: usize| {
                    vals.get(i)
                        .and_then(|v| v.as_ref())
                        .map(|b| String::from_utf8_lossy(b).into_owned())
                };
                if let Some(t) = text(0) {
                    *next_timeline = Some(parse_num(&t, "next timeline")?);
                }
                if let Some(l) = text(1) {
                    *next_start = Some(parse_lsn_field(&l, "next timeline start")?);
                }
            }
            (Phase::Ending { next_timeline, next_start }, BackendMessage::ReadyForQuery(_)) => {
                let end = StreamEnd::TimelineEnded {
                    next_timeline: *next_timeline,
                    next_timeline_start_lsn: *next_start,
                };
                self.client.end()?;
                self.phase = Phase::Ended(end);
            }
            (
                Phase::Ending { .. },
                BackendMessage::RowDescription(_) | BackendMessage::CommandComplete(_),
            ) => {}
            (_, BackendMessage::ErrorResponse(fields)) => {
                return Err(ClientError::server("replication stream", fields))
            }
            (_, BackendMessage::NoticeResponse(_) | BackendMessage::ParameterStatus { .. }) => {}
            (phase, other) => {
                return Err(ClientError::protocol(format!(
                    "unexpected {other:?} in the replication stream ({phase:?})"
                )))
            }
        }
        Ok(None)
    }

    /// Sends a standby status update: WAL received up to `write`, durable
    /// up to `flush` (the slot's restart LSN follows it), applied up to
    /// `apply`; `reply_requested` asks the server for a keepalive back.
    /// Cancel-safe (see the module comment).
    ///
    /// While the stream is ending (a CopyDone was sent, the server's answer
    /// is not read yet: a cancelled [`recv`](Self::recv) can leave it
    /// there) no status is sent (only what is pending, such as our
    /// CopyDone) and the call succeeds: after our CopyDone
    /// the protocol allows no more CopyData, and the positions are
    /// reported again on the next stream. After the end it is an error.
    pub async fn send_standby_status(
        &mut self,
        write: u64,
        flush: u64,
        apply: u64,
        reply_requested: bool,
    ) -> Result<(), ClientError> {
        match self.phase {
            Phase::Streaming => {}
            Phase::Ending { .. } => return self.client.flush().await,
            Phase::Ended(_) => {
                return Err(ClientError::protocol("standby status after the end of the stream"))
            }
        }
        let now = PgTimestamp::now();
        put_copy_data_with(self.client.write_buf(), |out| {
            out.put_u8(b'r');
            out.put_u64(write);
            out.put_u64(flush);
            out.put_u64(apply);
            out.put_i64(now.0);
            out.put_u8(u8::from(reply_requested));
        });
        self.client.flush().await
    }

    /// Sends whatever a cancelled send left unsent. Cancel-safe.
    pub async fn flush(&mut self) -> Result<(), ClientError> {
        self.client.flush().await
    }

    /// Ends the stream from the client side (CopyDone), discarding the WAL
    /// still in flight, up to the server's ReadyForQuery; the client is
    /// usable again afterwards.
    pub async fn stop(&mut self) -> Result<StreamEnd, ClientError> {
        if self.phase == Phase::Streaming {
            frontend::copy_done(self.client.write_buf());
            self.phase = Phase::Ending { next_timeline: None, next_start: None };
        }
        loop {
            if let ReplicationMessage::End(end) = self.recv().await? {
                return Ok(end);
            }
        }
    }
}

fn parse_copy_data(mut body: Bytes) -> Result<ReplicationMessage, ClientError> {
    let Some(&kind) = body.first() else {
        return Err(ClientError::protocol("empty CopyData in the replication stream"));
    };
    body.advance(1);
    match kind {
        b'w' => {
            if body.len() < 24 {
                return Err(ClientError::protocol(format!(
                    "XLogData header of {} bytes, expected 24",
                    body.len()
                )));
            }
            let wal_start = body.get_u64();
            let wal_end = body.get_u64();
            let server_time = PgTimestamp(body.get_i64());
            Ok(ReplicationMessage::XLogData(XLogData {
                wal_start,
                wal_end,
                server_time,
                data: body,
            }))
        }
        b'k' => {
            if body.len() != 17 {
                return Err(ClientError::protocol(format!(
                    "keepalive of {} bytes, expected 17",
                    body.len()
                )));
            }
            Ok(ReplicationMessage::PrimaryKeepalive(PrimaryKeepalive {
                wal_end: body.get_u64(),
                server_time: PgTimestamp(body.get_i64()),
                reply_requested: body.get_u8() != 0,
            }))
        }
        other => Err(ClientError::protocol(format!(
            "CopyData of type {:?} in the replication stream",
            other as char
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_server_messages() {
        let mut w = vec![b'w'];
        w.extend_from_slice(&0x1_0000_0010u64.to_be_bytes());
        w.extend_from_slice(&0x1_0000_0020u64.to_be_bytes());
        w.extend_from_slice(&7i64.to_be_bytes());
        w.extend_from_slice(b"wal");
        let ReplicationMessage::XLogData(x) = parse_copy_data(Bytes::from(w.clone())).unwrap()
        else {
            panic!()
        };
        assert_eq!(
            (x.wal_start, x.wal_end, x.server_time),
            (0x1_0000_0010, 0x1_0000_0020, PgTimestamp(7))
        );
        assert_eq!(&x.data[..], b"wal");

        let mut k = vec![b'k'];
        k.extend_from_slice(&5u64.to_be_bytes());
        k.extend_from_slice(&(-1i64).to_be_bytes());
        k.push(1);
        assert_eq!(
            parse_copy_data(Bytes::from(k.clone())).unwrap(),
            ReplicationMessage::PrimaryKeepalive(PrimaryKeepalive {
                wal_end: 5,
                server_time: PgTimestamp(-1),
                reply_requested: true
            })
        );

        for bad in [&b""[..], b"x", &w[..24], &k[..17], b"k\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0"] {
            let e = parse_copy_data(Bytes::copy_from_slice(bad)).unwrap_err();
            assert!(matches!(e, ClientError::Protocol(_)), "{bad:?}: {e}");
        }
    }
}
