//! Pure, synchronous decoders of the PostgreSQL v3 wire protocol: the
//! startup packet, tagged messages (either direction), NUL-terminated
//! strings, and ErrorResponse/NoticeResponse fields.
//!
//! Invariants (what the fuzz driver checks): no decoder panics on any
//! input; every length is checked against its bound *before* anything is
//! allocated or awaited, so a peer cannot make the reader buffer without
//! bound; a decoder either returns a complete value, `None` ("need more
//! bytes", only while the declared length is within bounds), or an error
//! naming what was wrong.

use crate::error::{sqlstate, QueryError};

/// Upper bound of a tagged frontend message (tag excluded). Pagestream
/// requests are at most 42 bytes, queries and JWTs a few hundred.
pub const MAX_MESSAGE_LEN: usize = 64 * 1024;
/// Bounds of a startup packet, length word included (as PostgreSQL's).
pub const MIN_STARTUP_LEN: usize = 8;
pub const MAX_STARTUP_LEN: usize = 10_000;

pub const PROTOCOL_VERSION_3: u32 = 3 << 16;
pub const CANCEL_REQUEST_CODE: u32 = (1234 << 16) | 5678;
pub const SSL_REQUEST_CODE: u32 = (1234 << 16) | 5679;
pub const GSSENC_REQUEST_CODE: u32 = (1234 << 16) | 5680;

/// The first packet of a connection.
#[derive(Debug, PartialEq, Eq)]
pub enum StartupPacket {
    SslRequest,
    GssEncRequest,
    /// CancelRequest with its process id and secret key.
    CancelRequest {
        pid: u32,
        key: u32,
    },
    /// Protocol 3.0 with its `name=value` parameters.
    Startup {
        params: Vec<(String, String)>,
    },
}

pub(crate) fn violation(message: impl Into<String>) -> QueryError {
    QueryError::fatal(sqlstate::PROTOCOL_VIOLATION, message)
}

/// A startup packet at the front of `buf`: `Ok(Some((packet, bytes used)))`,
/// `Ok(None)` if incomplete.
pub fn parse_startup(buf: &[u8]) -> Result<Option<(StartupPacket, usize)>, QueryError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_be_bytes(buf[..4].try_into().unwrap()) as usize;
    if !(MIN_STARTUP_LEN..=MAX_STARTUP_LEN).contains(&len) {
        return Err(violation(format!("invalid startup packet length {len}")));
    }
    if buf.len() < len {
        return Ok(None);
    }
    let code = u32::from_be_bytes(buf[4..8].try_into().unwrap());
    let body = &buf[8..len];
    let packet = match code {
        SSL_REQUEST_CODE => StartupPacket::SslRequest,
        GSSENC_REQUEST_CODE => StartupPacket::GssEncRequest,
        CANCEL_REQUEST_CODE => {
            if body.len() != 8 {
                return Err(violation(format!("CancelRequest of {len} bytes, expected 16")));
            }
            let pid = u32::from_be_bytes(body[..4].try_into().unwrap());
            StartupPacket::CancelRequest {
                pid,
                key: u32::from_be_bytes(body[4..].try_into().unwrap()),
            }
        }
        PROTOCOL_VERSION_3 => StartupPacket::Startup { params: parse_params(body)? },
        other => {
            return Err(QueryError::fatal(
                sqlstate::FEATURE_NOT_SUPPORTED,
                format!(
                    "unsupported frontend protocol {}.{}: server supports 3.0",
                    other >> 16,
                    other & 0xffff
                ),
            ))
        }
    };
    Ok(Some((packet, len)))
}

/// `name\0value\0 ... \0` of a StartupMessage.
pub fn parse_params(mut body: &[u8]) -> Result<Vec<(String, String)>, QueryError> {
    let mut params = Vec::new();
    loop {
        let name = read_cstr(&mut body)?;
        if name.is_empty() {
            break;
        }
        let value = read_cstr(&mut body)?;
        params.push((name.to_string(), value.to_string()));
    }
    if !body.is_empty() {
        return Err(violation("trailing bytes after startup parameters"));
    }
    Ok(params)
}

/// Where a tagged message sits in a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHead {
    pub tag: u8,
    /// Body length (the length word excluded).
    pub body_len: usize,
}

impl FrameHead {
    /// Tag, length word and body.
    pub fn total_len(&self) -> usize {
        5 + self.body_len
    }
}

/// The head of the tagged message at the front of `buf` if `buf` holds all
/// of it; `Ok(None)` if more bytes are needed. `max_body_len` bounds the
/// declared length, checked before anything waits for the body.
pub fn parse_frame(buf: &[u8], max_body_len: usize) -> Result<Option<FrameHead>, QueryError> {
    if buf.len() < 5 {
        return Ok(None);
    }
    let len = u32::from_be_bytes(buf[1..5].try_into().unwrap()) as usize;
    if len < 4 {
        return Err(violation(format!("invalid message length {len}")));
    }
    if len - 4 > max_body_len {
        return Err(violation(format!(
            "message of {} bytes exceeds the limit of {max_body_len} bytes",
            len - 4
        )));
    }
    let head = FrameHead { tag: buf[0], body_len: len - 4 };
    Ok((buf.len() >= head.total_len()).then_some(head))
}

/// A NUL-terminated UTF-8 string from the front of `body`.
pub fn read_cstr<'a>(body: &mut &'a [u8]) -> Result<&'a str, QueryError> {
    let nul = body
        .iter()
        .position(|&b| b == 0)
        .ok_or_else(|| violation("missing NUL terminator in a string"))?;
    let s = std::str::from_utf8(&body[..nul]).map_err(|_| violation("string is not UTF-8"))?;
    *body = &body[nul + 1..];
    Ok(s)
}

/// The body of a message that is exactly one C string (Query, PasswordMessage).
pub fn single_cstr(mut body: &[u8]) -> Result<&str, QueryError> {
    let s = read_cstr(&mut body)?;
    if !body.is_empty() {
        return Err(violation("trailing bytes after a string message"));
    }
    Ok(s)
}

/// The fields of an ErrorResponse or NoticeResponse body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorFields {
    /// `S` (localized) or `V` (never localized) severity.
    pub severity: String,
    /// `C`: the SQLSTATE.
    pub code: String,
    /// `M`: the primary message.
    pub message: String,
    /// `D`: detail.
    pub detail: Option<String>,
    /// `H`: hint.
    pub hint: Option<String>,
}

impl ErrorFields {
    /// Parse `(type byte, C string)*` ended by a zero byte. Unknown field
    /// types are skipped, as the protocol asks; invalid UTF-8 is replaced.
    pub fn parse(mut body: &[u8]) -> Result<ErrorFields, QueryError> {
        let mut f = ErrorFields::default();
        loop {
            let (&kind, rest) = body
                .split_first()
                .ok_or_else(|| violation("error fields end without a terminator"))?;
            body = rest;
            if kind == 0 {
                break;
            }
            let nul = body
                .iter()
                .position(|&b| b == 0)
                .ok_or_else(|| violation("error field without a NUL terminator"))?;
            let value = String::from_utf8_lossy(&body[..nul]).into_owned();
            body = &body[nul + 1..];
            match kind {
                b'S' if f.severity.is_empty() => f.severity = value,
                b'V' => f.severity = value,
                b'C' => f.code = value,
                b'M' => f.message = value,
                b'D' => f.detail = Some(value),
                b'H' => f.hint = Some(value),
                _ => {}
            }
        }
        if !body.is_empty() {
            return Err(violation("trailing bytes after error fields"));
        }
        Ok(f)
    }
}

impl std::fmt::Display for ErrorFields {
    /// `SEVERITY SQLSTATE: message` (and detail, hint when present).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.severity, self.code, self.message)?;
        if let Some(d) = &self.detail {
            write!(f, " (detail: {d})")?;
        }
        if let Some(h) = &self.hint {
            write!(f, " (hint: {h})")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
