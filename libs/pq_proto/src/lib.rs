//! libpq (the PostgreSQL v3 wire protocol) for both directions, shared by
//! the page service (server), pagebench and the tests (clients), and the
//! WAL receiver (client, `replication=true`).
//!
//! Files: `framing` (pure decoders: startup packet, tagged frames, strings,
//! error fields; fuzzed), `extended` (decoders of the extended query protocol's
//! messages), `backend` (encoders of server messages),
//! `server` (socket reader/writer of a server session), `connstring`
//! (libpq connection strings), `client` (a client session and
//! backend-message decoding), `replication` (a physical replication client
//! on top of `client`), `error` (`QueryError`, SQLSTATEs).

pub mod backend;
pub mod client;
pub mod connstring;
pub mod error;
pub mod extended;
pub mod framing;
pub mod replication;
pub mod server;

pub use client::{Client, ClientError};
pub use connstring::{ConnString, ConnStringError};
pub use error::{sqlstate, QueryError};
pub use framing::{
    parse_frame, parse_startup, read_cstr, single_cstr, ErrorFields, StartupPacket,
    MAX_MESSAGE_LEN, MAX_STARTUP_LEN, MIN_STARTUP_LEN,
};
pub use replication::ReplicationClient;
pub use server::{Frame, FrameReader, FrameWriter};
