//! Reading one pagestream request off the CopyBoth stream and preparing it
//! for the executor; shared by the serial and pipelined handlers (which sit
//! above this file; `stream.rs` above them picks one).
//!
//! A stream-ending protocol error becomes `BatchedFeMessage::Fatal`, so it
//! takes its place in the response order (see `stream.rs` for how a stream
//! ends).

use std::time::Instant;

use pageserver_api::pagestream::{PagestreamFeMessage, PagestreamProtocolVersion};
use tokio_util::sync::CancellationToken;
use utils::quote::quote_bytes;

use super::batch::{prepare, BatchedFeMessage};
use super::error::{sqlstate, QueryError};
use crate::tenant::Timeline;
use pq_proto::FrameReader;

/// Reads the next request and prepares it for the executor. `Ok(None)`:
/// the client ended the stream cleanly. Stream-ending protocol errors come
/// back as `Ok(Some(BatchedFeMessage::Fatal))` so that they take their place
/// in the response order; socket errors and shutdown as `Err`.
pub async fn next_request(
    reader: &mut FrameReader,
    tl: &Timeline,
    version: PagestreamProtocolVersion,
    cancel: &CancellationToken,
) -> Result<Option<BatchedFeMessage>, QueryError> {
    let frame = match reader.read_message(cancel).await {
        Ok(Some(frame)) => frame,
        Ok(None) => return Ok(None),
        Err(e @ QueryError::Fatal { .. }) => return Ok(Some(BatchedFeMessage::Fatal(e))),
        Err(e) => return Err(e),
    };
    let fatal = |message: String| {
        Ok(Some(BatchedFeMessage::Fatal(QueryError::fatal(sqlstate::PROTOCOL_VIOLATION, message))))
    };
    match frame.tag {
        b'd' => match PagestreamFeMessage::parse(frame.body, version) {
            Ok(req) => Ok(Some(prepare(tl, req, Instant::now()))),
            Err(e) => fatal(format!("invalid pagestream message: {e}")),
        },
        b'X' => Ok(None),
        b'c' => fatal("client sent CopyDone: a pagestream ends with Terminate or EOF".to_string()),
        b'f' => {
            let why = quote_bytes(frame.body.strip_suffix(&[0]).unwrap_or(frame.body));
            fatal(format!("client sent CopyFail: {why}"))
        }
        tag => fatal(format!("unexpected message type '{}' in a pagestream", tag.escape_ascii())),
    }
}
