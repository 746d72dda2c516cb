//! Opening a pagestream: a libpq session (`pq_proto::client`) switched to
//! CopyBoth with `pagestream_v2|v3 <tenant> <timeline>`.
//!
//! Invariant: [`connect_pagestream`] returns only once the server has
//! answered the pagestream query with CopyBothResponse; bytes it read past
//! that point are handed back in the returned buffer, never dropped.

use std::time::Duration;

use anyhow::bail;
use bytes::BytesMut;
use pq_proto::client::{BackendMessage, Client};
use pq_proto::ConnString;
use tokio::net::TcpStream;
use utils::id::{TenantId, TimelineId};

/// Bound on the whole connection setup (TCP connect, startup, query).
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a run waits for the responses still in flight at its end.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Protocol version requested with the pagestream query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Protocol {
    V2,
    V3,
}

impl Protocol {
    pub fn query_word(self) -> &'static str {
        match self {
            Protocol::V2 => "pagestream_v2",
            Protocol::V3 => "pagestream_v3",
        }
    }
}

/// Opens a libpq session and switches it to the pagestream sub-protocol.
/// Returns the socket and any bytes already read after CopyBothResponse.
pub async fn connect_pagestream(
    cs: &ConnString,
    tenant: TenantId,
    timeline: TimelineId,
    protocol: Protocol,
) -> anyhow::Result<(TcpStream, BytesMut)> {
    let addr = cs.addr();
    let mut client =
        Client::connect(&addr, &cs.startup_params(), cs.password.as_deref(), SETUP_TIMEOUT).await?;
    let query = format!("{} {} {}", protocol.query_word(), tenant, timeline);
    match client.start_copy(&query).await? {
        BackendMessage::CopyBothResponse => Ok(client.into_parts()),
        other => bail!("'{query}' answered {other:?}, not CopyBothResponse"),
    }
}
