//! Encoders of backend messages (server to client), appending to a buffer:
//! authentication, ParameterStatus, ReadyForQuery, EmptyQueryResponse,
//! ErrorResponse/NoticeResponse with their fields, CopyBothResponse,
//! CopyOutResponse, CopyData, CopyDone, CommandComplete, RowDescription and
//! DataRow of text columns, and the extended query protocol's replies
//! (ParseComplete, BindComplete, CloseComplete, ParameterDescription,
//! NoData, PortalSuspended).

use bytes::{BufMut, BytesMut};

use crate::framing::ErrorFields;

/// Appends `tag`, a length placeholder, the body written by `f`, then
/// patches the length (which counts itself, not the tag).
fn frame(buf: &mut BytesMut, tag: u8, f: impl FnOnce(&mut BytesMut)) {
    buf.put_u8(tag);
    let at = buf.len();
    buf.put_u32(0);
    f(buf);
    let len = (buf.len() - at) as u32;
    buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
}

fn put_cstr(buf: &mut BytesMut, s: &str) {
    for &b in s.as_bytes() {
        buf.put_u8(if b == 0 { b' ' } else { b });
    }
    buf.put_u8(0);
}

/// The single byte answering SSLRequest / GSSENCRequest: not supported.
pub fn encryption_refused(buf: &mut BytesMut) {
    buf.put_u8(b'N');
}

pub fn auth_ok(buf: &mut BytesMut) {
    frame(buf, b'R', |b| b.put_i32(0));
}

pub fn auth_cleartext_password(buf: &mut BytesMut) {
    frame(buf, b'R', |b| b.put_i32(3));
}

pub fn parameter_status(buf: &mut BytesMut, name: &str, value: &str) {
    frame(buf, b'S', |b| {
        put_cstr(b, name);
        put_cstr(b, value);
    });
}

/// ReadyForQuery, idle.
pub fn ready_for_query(buf: &mut BytesMut) {
    frame(buf, b'Z', |b| b.put_u8(b'I'));
}

pub fn empty_query_response(buf: &mut BytesMut) {
    frame(buf, b'I', |_| {});
}

/// ErrorResponse with fields S and V (`severity`), C (`code`), M.
pub fn error_response(buf: &mut BytesMut, severity: &str, code: &[u8; 5], message: &str) {
    frame(buf, b'E', |b| {
        b.put_u8(b'S');
        put_cstr(b, severity);
        b.put_u8(b'V');
        put_cstr(b, severity);
        b.put_u8(b'C');
        b.put_slice(code);
        b.put_u8(0);
        b.put_u8(b'M');
        put_cstr(b, message);
        b.put_u8(0);
    });
}

/// CopyBothResponse: overall format 0 (text), 0 columns.
pub fn copy_both_response(buf: &mut BytesMut) {
    frame(buf, b'W', |b| {
        b.put_u8(0);
        b.put_i16(0);
    });
}

/// NoticeResponse with the same fields as an ErrorResponse.
pub fn notice_response(buf: &mut BytesMut, f: &ErrorFields) {
    fields_message(buf, b'N', f);
}

/// ErrorResponse with every field of `f` (S and V, C, M, D, H).
pub fn error_response_fields(buf: &mut BytesMut, f: &ErrorFields) {
    fields_message(buf, b'E', f);
}

fn fields_message(buf: &mut BytesMut, tag: u8, f: &ErrorFields) {
    frame(buf, tag, |b| {
        for (kind, value) in [
            (b'S', Some(&f.severity)),
            (b'V', Some(&f.severity)),
            (b'C', Some(&f.code)),
            (b'M', Some(&f.message)),
            (b'D', f.detail.as_ref()),
            (b'H', f.hint.as_ref()),
        ] {
            if let Some(v) = value {
                b.put_u8(kind);
                put_cstr(b, v);
            }
        }
        b.put_u8(0);
    });
}

/// CopyOutResponse: overall format 0 (text), 0 columns.
pub fn copy_out_response(buf: &mut BytesMut) {
    frame(buf, b'H', |b| {
        b.put_u8(0);
        b.put_i16(0);
    });
}

pub fn copy_data(buf: &mut BytesMut, data: &[u8]) {
    frame(buf, b'd', |b| b.put_slice(data));
}

pub fn copy_done(buf: &mut BytesMut) {
    frame(buf, b'c', |_| {});
}

pub fn command_complete(buf: &mut BytesMut, tag: &str) {
    frame(buf, b'C', |b| put_cstr(b, tag));
}

/// RowDescription of text columns (type `text`, OID 25), text format.
pub fn row_description(buf: &mut BytesMut, columns: &[&str]) {
    row_description_formats(buf, columns, &[]);
}

/// RowDescription of text columns (type `text`, OID 25) with one format
/// code per column (0 text, 1 binary; a `text` value is the same bytes in
/// both). `formats` empty: all text.
pub fn row_description_formats(buf: &mut BytesMut, columns: &[&str], formats: &[i16]) {
    assert!(formats.is_empty() || formats.len() == columns.len(), "one format per column");
    frame(buf, b'T', |b| {
        b.put_i16(columns.len() as i16);
        for (i, c) in columns.iter().enumerate() {
            put_cstr(b, c);
            b.put_i32(0); // table OID
            b.put_i16(0); // column number
            b.put_i32(25); // type OID: text
            b.put_i16(-1); // variable length
            b.put_i32(-1); // no type modifier
            b.put_i16(formats.get(i).copied().unwrap_or(0));
        }
    });
}

pub fn parse_complete(buf: &mut BytesMut) {
    frame(buf, b'1', |_| {});
}

pub fn bind_complete(buf: &mut BytesMut) {
    frame(buf, b'2', |_| {});
}

pub fn close_complete(buf: &mut BytesMut) {
    frame(buf, b'3', |_| {});
}

/// NoData: the statement or portal returns no rows.
pub fn no_data(buf: &mut BytesMut) {
    frame(buf, b'n', |_| {});
}

/// PortalSuspended: Execute reached its row limit before the end.
pub fn portal_suspended(buf: &mut BytesMut) {
    frame(buf, b's', |_| {});
}

/// ParameterDescription with the type OIDs of the statement's parameters.
pub fn parameter_description(buf: &mut BytesMut, type_oids: &[u32]) {
    frame(buf, b't', |b| {
        b.put_i16(type_oids.len() as i16);
        for oid in type_oids {
            b.put_u32(*oid);
        }
    });
}

/// DataRow of text values (`None` is NULL).
pub fn data_row(buf: &mut BytesMut, values: &[Option<&str>]) {
    frame(buf, b'D', |b| {
        b.put_i16(values.len() as i16);
        for v in values {
            match v {
                Some(v) => {
                    b.put_i32(v.len() as i32);
                    b.put_slice(v.as_bytes());
                }
                None => b.put_i32(-1),
            }
        }
    });
}
