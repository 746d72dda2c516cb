//! Pagestream v2/v3 wire codec: the messages carried, one per CopyData, inside
//! the libpq CopyBoth stream opened by `pagestream_v2` / `pagestream_v3`.
//! Byte layouts are specified in `docs/protocol.md` (and Neon's compute).
//!
//! Invariants:
//! - all integers are big-endian; a rel tag is `spcnode u32, dbnode u32,
//!   relnode u32, forknum u8` (13 bytes); pages are exactly [`BLCKSZ`] bytes;
//! - v2 request header: `tag u8, request_lsn u64, not_modified_since u64`;
//!   v3 adds `reqid u64` before the LSNs, and v3 responses repeat that header
//!   and echo the request's body fields before their payload;
//! - decoding is strict: an unknown tag, a message shorter than its layout, or
//!   trailing bytes after it is an error, never a partial value;
//! - encoding never fails; it panics only on values that have no encoding
//!   (a page that is not `BLCKSZ` bytes, an SLRU segment that is not a whole
//!   number of pages), which callers must rule out;
//! - a v2 response carries no request fields, so decoding one yields them as
//!   zero ([`PagestreamRequest::default`], rel `0/0/0`, blkno 0, ...).

use bytes::{Buf, BufMut, Bytes, BytesMut};
use utils::lsn::Lsn;

use crate::reltag::RelTag;

/// PostgreSQL page size.
pub use postgres_ffi::BLCKSZ;

/// Request tags.
pub const TAG_EXISTS: u8 = 0;
pub const TAG_NBLOCKS: u8 = 1;
pub const TAG_GET_PAGE: u8 = 2;
pub const TAG_DB_SIZE: u8 = 3;
pub const TAG_GET_SLRU_SEGMENT: u8 = 4;

/// Response tags.
pub const TAG_EXISTS_RESPONSE: u8 = 100;
pub const TAG_NBLOCKS_RESPONSE: u8 = 101;
pub const TAG_GET_PAGE_RESPONSE: u8 = 102;
pub const TAG_ERROR_RESPONSE: u8 = 103;
pub const TAG_DB_SIZE_RESPONSE: u8 = 104;
pub const TAG_GET_SLRU_SEGMENT_RESPONSE: u8 = 105;

const RELTAG_LEN: usize = 13;

/// Which pagestream dialect a stream speaks (chosen by the libpq command).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PagestreamProtocolVersion {
    V2,
    V3,
}

impl PagestreamProtocolVersion {
    /// Bytes of the request header, tag included (17 for v2, 25 for v3).
    pub const fn request_header_len(self) -> usize {
        match self {
            PagestreamProtocolVersion::V2 => 17,
            PagestreamProtocolVersion::V3 => 25,
        }
    }

    /// Bytes of the response header, tag included (1 for v2, 25 for v3).
    pub const fn response_header_len(self) -> usize {
        match self {
            PagestreamProtocolVersion::V2 => 1,
            PagestreamProtocolVersion::V3 => 25,
        }
    }
}

/// Decoding failure; the stream that carried the message cannot continue.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PagestreamDecodeError {
    #[error("empty pagestream message")]
    Empty,
    #[error("unknown pagestream {kind} tag {tag}")]
    UnknownTag { kind: &'static str, tag: u8 },
    #[error("pagestream message too short: {field} needs {need} bytes, {have} left")]
    Short { field: &'static str, need: usize, have: usize },
    #[error("pagestream message has {0} trailing bytes")]
    TrailingBytes(usize),
    #[error("invalid pagestream {field}: {detail}")]
    Invalid { field: &'static str, detail: String },
}

type DecodeResult<T> = Result<T, PagestreamDecodeError>;

/// The header fields every request carries. In v2 `reqid` is not on the wire
/// (it decodes as 0 and is not encoded).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct PagestreamRequest {
    pub reqid: u64,
    pub request_lsn: Lsn,
    pub not_modified_since: Lsn,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PagestreamExistsRequest {
    pub hdr: PagestreamRequest,
    pub rel: RelTag,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PagestreamNblocksRequest {
    pub hdr: PagestreamRequest,
    pub rel: RelTag,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PagestreamGetPageRequest {
    pub hdr: PagestreamRequest,
    pub rel: RelTag,
    pub blkno: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PagestreamDbSizeRequest {
    pub hdr: PagestreamRequest,
    pub dbnode: u32,
}

/// `kind` is kept as the raw byte (0 clog, 1 multixact members, 2 multixact
/// offsets) so that any value round-trips and is echoed exactly; the server
/// rejects unknown kinds with an in-band error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PagestreamGetSlruSegmentRequest {
    pub hdr: PagestreamRequest,
    pub kind: u8,
    pub segno: u32,
}

/// A request (frontend message) of the pagestream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PagestreamFeMessage {
    Exists(PagestreamExistsRequest),
    Nblocks(PagestreamNblocksRequest),
    GetPage(PagestreamGetPageRequest),
    DbSize(PagestreamDbSizeRequest),
    GetSlruSegment(PagestreamGetSlruSegmentRequest),
}

/// A bounds-checked big-endian reader over one message body.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn need(&self, field: &'static str, need: usize) -> DecodeResult<()> {
        if self.buf.len() < need {
            return Err(PagestreamDecodeError::Short { field, need, have: self.buf.len() });
        }
        Ok(())
    }

    fn u8(&mut self, field: &'static str) -> DecodeResult<u8> {
        self.need(field, 1)?;
        Ok(self.buf.get_u8())
    }

    fn u32(&mut self, field: &'static str) -> DecodeResult<u32> {
        self.need(field, 4)?;
        Ok(self.buf.get_u32())
    }

    fn u64(&mut self, field: &'static str) -> DecodeResult<u64> {
        self.need(field, 8)?;
        Ok(self.buf.get_u64())
    }

    fn i64(&mut self, field: &'static str) -> DecodeResult<i64> {
        self.need(field, 8)?;
        Ok(self.buf.get_i64())
    }

    fn lsn(&mut self, field: &'static str) -> DecodeResult<Lsn> {
        self.u64(field).map(Lsn)
    }

    fn rel(&mut self) -> DecodeResult<RelTag> {
        self.need("rel tag", RELTAG_LEN)?;
        Ok(RelTag {
            spcnode: self.buf.get_u32(),
            dbnode: self.buf.get_u32(),
            relnode: self.buf.get_u32(),
            forknum: self.buf.get_u8(),
        })
    }

    fn bool(&mut self, field: &'static str) -> DecodeResult<bool> {
        match self.u8(field)? {
            0 => Ok(false),
            1 => Ok(true),
            v => {
                Err(PagestreamDecodeError::Invalid { field, detail: format!("{v} is not 0 or 1") })
            }
        }
    }

    /// `n` raw bytes as a zero-copy slice of `whole` (the buffer `self.buf` lies in).
    fn bytes(&mut self, whole: &Bytes, field: &'static str, n: usize) -> DecodeResult<Bytes> {
        self.need(field, n)?;
        let start = whole.len() - self.buf.len();
        self.buf.advance(n);
        Ok(whole.slice(start..start + n))
    }

    /// A NUL-terminated UTF-8 string.
    fn cstr(&mut self, field: &'static str) -> DecodeResult<String> {
        let Some(nul) = self.buf.iter().position(|&b| b == 0) else {
            return Err(PagestreamDecodeError::Invalid {
                field,
                detail: "missing NUL terminator".to_string(),
            });
        };
        let s = std::str::from_utf8(&self.buf[..nul]).map_err(|e| {
            PagestreamDecodeError::Invalid { field, detail: format!("not UTF-8: {e}") }
        })?;
        let s = s.to_string();
        self.buf.advance(nul + 1);
        Ok(s)
    }

    fn finish(self) -> DecodeResult<()> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(PagestreamDecodeError::TrailingBytes(self.buf.len()))
        }
    }
}

fn put_rel(buf: &mut BytesMut, rel: &RelTag) {
    buf.put_u32(rel.spcnode);
    buf.put_u32(rel.dbnode);
    buf.put_u32(rel.relnode);
    buf.put_u8(rel.forknum);
}

/// `rel 0/0/0 fork 0`: what a v2 response decodes to in place of the echo.
const NO_REL: RelTag = RelTag { spcnode: 0, dbnode: 0, relnode: 0, forknum: 0 };

impl PagestreamFeMessage {
    /// Decodes one request (the body of one CopyData).
    pub fn parse(body: &[u8], version: PagestreamProtocolVersion) -> DecodeResult<Self> {
        let mut r = Reader { buf: body };
        if r.buf.is_empty() {
            return Err(PagestreamDecodeError::Empty);
        }
        let tag = r.u8("tag")?;
        if tag > TAG_GET_SLRU_SEGMENT {
            return Err(PagestreamDecodeError::UnknownTag { kind: "request", tag });
        }
        let reqid = match version {
            PagestreamProtocolVersion::V2 => 0,
            PagestreamProtocolVersion::V3 => r.u64("reqid")?,
        };
        let hdr = PagestreamRequest {
            reqid,
            request_lsn: r.lsn("request_lsn")?,
            not_modified_since: r.lsn("not_modified_since")?,
        };
        let msg = match tag {
            TAG_EXISTS => {
                PagestreamFeMessage::Exists(PagestreamExistsRequest { hdr, rel: r.rel()? })
            }
            TAG_NBLOCKS => {
                PagestreamFeMessage::Nblocks(PagestreamNblocksRequest { hdr, rel: r.rel()? })
            }
            TAG_GET_PAGE => PagestreamFeMessage::GetPage(PagestreamGetPageRequest {
                hdr,
                rel: r.rel()?,
                blkno: r.u32("blkno")?,
            }),
            TAG_DB_SIZE => PagestreamFeMessage::DbSize(PagestreamDbSizeRequest {
                hdr,
                dbnode: r.u32("dbnode")?,
            }),
            TAG_GET_SLRU_SEGMENT => {
                PagestreamFeMessage::GetSlruSegment(PagestreamGetSlruSegmentRequest {
                    hdr,
                    kind: r.u8("kind")?,
                    segno: r.u32("segno")?,
                })
            }
            _ => unreachable!("tag range checked above"),
        };
        r.finish()?;
        Ok(msg)
    }

    /// The request's tag byte.
    pub fn tag(&self) -> u8 {
        match self {
            PagestreamFeMessage::Exists(_) => TAG_EXISTS,
            PagestreamFeMessage::Nblocks(_) => TAG_NBLOCKS,
            PagestreamFeMessage::GetPage(_) => TAG_GET_PAGE,
            PagestreamFeMessage::DbSize(_) => TAG_DB_SIZE,
            PagestreamFeMessage::GetSlruSegment(_) => TAG_GET_SLRU_SEGMENT,
        }
    }

    pub fn header(&self) -> &PagestreamRequest {
        match self {
            PagestreamFeMessage::Exists(r) => &r.hdr,
            PagestreamFeMessage::Nblocks(r) => &r.hdr,
            PagestreamFeMessage::GetPage(r) => &r.hdr,
            PagestreamFeMessage::DbSize(r) => &r.hdr,
            PagestreamFeMessage::GetSlruSegment(r) => &r.hdr,
        }
    }

    /// Appends the encoded request to `buf`.
    pub fn serialize_into(&self, buf: &mut BytesMut, version: PagestreamProtocolVersion) {
        buf.put_u8(self.tag());
        let hdr = self.header();
        if version == PagestreamProtocolVersion::V3 {
            buf.put_u64(hdr.reqid);
        }
        buf.put_u64(hdr.request_lsn.0);
        buf.put_u64(hdr.not_modified_since.0);
        match self {
            PagestreamFeMessage::Exists(r) => put_rel(buf, &r.rel),
            PagestreamFeMessage::Nblocks(r) => put_rel(buf, &r.rel),
            PagestreamFeMessage::GetPage(r) => {
                put_rel(buf, &r.rel);
                buf.put_u32(r.blkno);
            }
            PagestreamFeMessage::DbSize(r) => buf.put_u32(r.dbnode),
            PagestreamFeMessage::GetSlruSegment(r) => {
                buf.put_u8(r.kind);
                buf.put_u32(r.segno);
            }
        }
    }

    /// The encoded request.
    pub fn serialize(&self, version: PagestreamProtocolVersion) -> Bytes {
        let mut buf = BytesMut::with_capacity(version.request_header_len() + RELTAG_LEN + 4);
        self.serialize_into(&mut buf, version);
        buf.freeze()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PagestreamExistsResponse {
    pub req: PagestreamExistsRequest,
    pub exists: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PagestreamNblocksResponse {
    pub req: PagestreamNblocksRequest,
    pub n_blocks: u32,
}

/// `page` must be exactly [`BLCKSZ`] bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PagestreamGetPageResponse {
    pub req: PagestreamGetPageRequest,
    pub page: Bytes,
}

/// In-band error: the request failed, the stream goes on. The message must
/// not contain NUL bytes (encoding replaces them with spaces).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PagestreamErrorResponse {
    pub req: PagestreamRequest,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PagestreamDbSizeResponse {
    pub req: PagestreamDbSizeRequest,
    /// Bytes.
    pub db_size: i64,
}

/// `segment` is a whole number of [`BLCKSZ`] pages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PagestreamGetSlruSegmentResponse {
    pub req: PagestreamGetSlruSegmentRequest,
    pub segment: Bytes,
}

/// A response (backend message) of the pagestream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PagestreamBeMessage {
    Exists(PagestreamExistsResponse),
    Nblocks(PagestreamNblocksResponse),
    GetPage(PagestreamGetPageResponse),
    Error(PagestreamErrorResponse),
    DbSize(PagestreamDbSizeResponse),
    GetSlruSegment(PagestreamGetSlruSegmentResponse),
}

impl PagestreamBeMessage {
    pub fn tag(&self) -> u8 {
        match self {
            PagestreamBeMessage::Exists(_) => TAG_EXISTS_RESPONSE,
            PagestreamBeMessage::Nblocks(_) => TAG_NBLOCKS_RESPONSE,
            PagestreamBeMessage::GetPage(_) => TAG_GET_PAGE_RESPONSE,
            PagestreamBeMessage::Error(_) => TAG_ERROR_RESPONSE,
            PagestreamBeMessage::DbSize(_) => TAG_DB_SIZE_RESPONSE,
            PagestreamBeMessage::GetSlruSegment(_) => TAG_GET_SLRU_SEGMENT_RESPONSE,
        }
    }

    /// The header of the request this responds to (zeros for a decoded v2 response).
    pub fn request_header(&self) -> &PagestreamRequest {
        match self {
            PagestreamBeMessage::Exists(r) => &r.req.hdr,
            PagestreamBeMessage::Nblocks(r) => &r.req.hdr,
            PagestreamBeMessage::GetPage(r) => &r.req.hdr,
            PagestreamBeMessage::Error(r) => &r.req,
            PagestreamBeMessage::DbSize(r) => &r.req.hdr,
            PagestreamBeMessage::GetSlruSegment(r) => &r.req.hdr,
        }
    }

    /// Exact length of the encoding, so callers can reserve (or frame) up front.
    pub fn serialized_len(&self, version: PagestreamProtocolVersion) -> usize {
        let v3 = version == PagestreamProtocolVersion::V3;
        let echo = |n: usize| if v3 { n } else { 0 };
        version.response_header_len()
            + match self {
                PagestreamBeMessage::Exists(_) => echo(RELTAG_LEN) + 1,
                PagestreamBeMessage::Nblocks(_) => echo(RELTAG_LEN) + 4,
                PagestreamBeMessage::GetPage(_) => echo(RELTAG_LEN + 4) + BLCKSZ,
                PagestreamBeMessage::Error(r) => r.message.len() + 1,
                PagestreamBeMessage::DbSize(_) => echo(4) + 8,
                PagestreamBeMessage::GetSlruSegment(r) => echo(5) + 4 + r.segment.len(),
            }
    }

    /// Appends the encoded response to `buf`.
    ///
    /// Panics if a GetPage page is not `BLCKSZ` bytes or an SLRU segment is
    /// not a whole number of pages: such a value has no encoding.
    pub fn serialize_into(&self, buf: &mut BytesMut, version: PagestreamProtocolVersion) {
        let v3 = version == PagestreamProtocolVersion::V3;
        buf.reserve(self.serialized_len(version));
        buf.put_u8(self.tag());
        if v3 {
            let hdr = self.request_header();
            buf.put_u64(hdr.reqid);
            buf.put_u64(hdr.request_lsn.0);
            buf.put_u64(hdr.not_modified_since.0);
        }
        match self {
            PagestreamBeMessage::Exists(r) => {
                if v3 {
                    put_rel(buf, &r.req.rel);
                }
                buf.put_u8(r.exists as u8);
            }
            PagestreamBeMessage::Nblocks(r) => {
                if v3 {
                    put_rel(buf, &r.req.rel);
                }
                buf.put_u32(r.n_blocks);
            }
            PagestreamBeMessage::GetPage(r) => {
                assert_eq!(r.page.len(), BLCKSZ, "GetPage response page must be BLCKSZ bytes");
                if v3 {
                    put_rel(buf, &r.req.rel);
                    buf.put_u32(r.req.blkno);
                }
                buf.put_slice(&r.page);
            }
            PagestreamBeMessage::Error(r) => {
                // The message is a C string on the wire: no interior NULs.
                for &b in r.message.as_bytes() {
                    buf.put_u8(if b == 0 { b' ' } else { b });
                }
                buf.put_u8(0);
            }
            PagestreamBeMessage::DbSize(r) => {
                if v3 {
                    buf.put_u32(r.req.dbnode);
                }
                buf.put_i64(r.db_size);
            }
            PagestreamBeMessage::GetSlruSegment(r) => {
                assert!(
                    r.segment.len() % BLCKSZ == 0 && r.segment.len() / BLCKSZ <= u32::MAX as usize,
                    "SLRU segment must be a whole number of pages, got {} bytes",
                    r.segment.len()
                );
                if v3 {
                    buf.put_u8(r.req.kind);
                    buf.put_u32(r.req.segno);
                }
                buf.put_u32((r.segment.len() / BLCKSZ) as u32);
                buf.put_slice(&r.segment);
            }
        }
    }

    /// Like [`Self::serialize_into`], but a GetPage page or an SLRU segment
    /// (the bulk of the message, always last) is not copied: it is returned,
    /// to be sent right after what was appended to `buf` (e.g. with a
    /// vectored write). Same panics.
    pub fn serialize_head_into(
        &self,
        buf: &mut BytesMut,
        version: PagestreamProtocolVersion,
    ) -> Option<Bytes> {
        match self {
            PagestreamBeMessage::GetPage(r) => {
                assert_eq!(r.page.len(), BLCKSZ, "GetPage response page must be BLCKSZ bytes");
                buf.reserve(self.serialized_len(version) - BLCKSZ);
                buf.put_u8(self.tag());
                if version == PagestreamProtocolVersion::V3 {
                    let hdr = self.request_header();
                    buf.put_u64(hdr.reqid);
                    buf.put_u64(hdr.request_lsn.0);
                    buf.put_u64(hdr.not_modified_since.0);
                    put_rel(buf, &r.req.rel);
                    buf.put_u32(r.req.blkno);
                }
                Some(r.page.clone())
            }
            PagestreamBeMessage::GetSlruSegment(r) => {
                assert!(
                    r.segment.len() % BLCKSZ == 0 && r.segment.len() / BLCKSZ <= u32::MAX as usize,
                    "SLRU segment must be a whole number of pages, got {} bytes",
                    r.segment.len()
                );
                // The encoding with an empty segment, then the real page count.
                let empty = PagestreamBeMessage::GetSlruSegment(PagestreamGetSlruSegmentResponse {
                    req: r.req,
                    segment: Bytes::new(),
                });
                empty.serialize_into(buf, version);
                let at = buf.len() - 4;
                buf[at..].copy_from_slice(&((r.segment.len() / BLCKSZ) as u32).to_be_bytes());
                Some(r.segment.clone())
            }
            _ => {
                self.serialize_into(buf, version);
                None
            }
        }
    }

    /// The encoded response.
    pub fn serialize(&self, version: PagestreamProtocolVersion) -> Bytes {
        let mut buf = BytesMut::with_capacity(self.serialized_len(version));
        self.serialize_into(&mut buf, version);
        buf.freeze()
    }

    /// Decodes one response (the body of one CopyData). Pages and segments
    /// are zero-copy slices of `body`; use `Bytes::copy_from_slice` for a `&[u8]`.
    pub fn deserialize(body: Bytes, version: PagestreamProtocolVersion) -> DecodeResult<Self> {
        let v3 = version == PagestreamProtocolVersion::V3;
        let mut r = Reader { buf: &body[..] };
        if r.buf.is_empty() {
            return Err(PagestreamDecodeError::Empty);
        }
        let tag = r.u8("tag")?;
        if !(TAG_EXISTS_RESPONSE..=TAG_GET_SLRU_SEGMENT_RESPONSE).contains(&tag) {
            return Err(PagestreamDecodeError::UnknownTag { kind: "response", tag });
        }
        let hdr = if v3 {
            PagestreamRequest {
                reqid: r.u64("reqid")?,
                request_lsn: r.lsn("request_lsn")?,
                not_modified_since: r.lsn("not_modified_since")?,
            }
        } else {
            PagestreamRequest::default()
        };
        let rel = |r: &mut Reader<'_>| if v3 { r.rel() } else { Ok(NO_REL) };
        let echo_u32 =
            |r: &mut Reader<'_>, field: &'static str| if v3 { r.u32(field) } else { Ok(0) };
        let msg = match tag {
            TAG_EXISTS_RESPONSE => {
                let req = PagestreamExistsRequest { hdr, rel: rel(&mut r)? };
                PagestreamBeMessage::Exists(PagestreamExistsResponse {
                    req,
                    exists: r.bool("exists")?,
                })
            }
            TAG_NBLOCKS_RESPONSE => {
                let req = PagestreamNblocksRequest { hdr, rel: rel(&mut r)? };
                PagestreamBeMessage::Nblocks(PagestreamNblocksResponse {
                    req,
                    n_blocks: r.u32("n_blocks")?,
                })
            }
            TAG_GET_PAGE_RESPONSE => {
                let rel = rel(&mut r)?;
                let req = PagestreamGetPageRequest { hdr, rel, blkno: echo_u32(&mut r, "blkno")? };
                let page = r.bytes(&body, "page", BLCKSZ)?;
                PagestreamBeMessage::GetPage(PagestreamGetPageResponse { req, page })
            }
            TAG_ERROR_RESPONSE => PagestreamBeMessage::Error(PagestreamErrorResponse {
                req: hdr,
                message: r.cstr("error message")?,
            }),
            TAG_DB_SIZE_RESPONSE => {
                let req = PagestreamDbSizeRequest { hdr, dbnode: echo_u32(&mut r, "dbnode")? };
                PagestreamBeMessage::DbSize(PagestreamDbSizeResponse {
                    req,
                    db_size: r.i64("db_size")?,
                })
            }
            TAG_GET_SLRU_SEGMENT_RESPONSE => {
                let (kind, segno) = if v3 { (r.u8("kind")?, r.u32("segno")?) } else { (0, 0) };
                let req = PagestreamGetSlruSegmentRequest { hdr, kind, segno };
                let n_blocks = r.u32("n_blocks")? as usize;
                let len =
                    n_blocks.checked_mul(BLCKSZ).ok_or_else(|| PagestreamDecodeError::Invalid {
                        field: "n_blocks",
                        detail: format!("{n_blocks} pages overflow"),
                    })?;
                let segment = r.bytes(&body, "segment pages", len)?;
                PagestreamBeMessage::GetSlruSegment(PagestreamGetSlruSegmentResponse {
                    req,
                    segment,
                })
            }
            _ => unreachable!("tag range checked above"),
        };
        r.finish()?;
        Ok(msg)
    }
}

#[cfg(test)]
mod golden;
#[cfg(test)]
mod tests;
