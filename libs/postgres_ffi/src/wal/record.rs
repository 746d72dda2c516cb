//! Decoding one whole WAL record (`XLogRecord` and what follows it, as
//! `DecodeXLogRecord` in PostgreSQL's `xlogreader.c` reads it) into a
//! [`DecodedWalRecord`].
//!
//! Layout: the 24-byte header; then sub-headers, each starting with an id
//! byte: block references (ids 0..=32, strictly increasing), the
//! replication origin (253), the top-level xid (252) and, last, the main
//! data length (255: u8, 254: u32); then the payload: for each block in
//! order its image bytes then its data bytes; then the main data.
//!
//! Invariants: the header lengths and the payload add up exactly to
//! `xl_tot_len` (= the record's length), else an error; block data and
//! main data and images are zero-copy slices of the record (images are
//! rebuilt only on demand, `BlockImage::restore`). The CRC is the stream
//! decoder's job (checked before).

use bytes::Bytes;
use utils::lsn::Lsn;

use super::image::{BlockImage, ImageCompression, ImageHeader};
use super::{BlockTag, DecodedBlock, DecodedWalRecord, WalDecodeError, XLOG_RECORD_HEADER_LEN};
use crate::PgMajorVersion;

/// Highest block reference id (`XLR_MAX_BLOCK_ID`).
pub const XLR_MAX_BLOCK_ID: u8 = 32;
/// Sub-header ids (`XLR_BLOCK_ID_*`).
pub const XLR_BLOCK_ID_DATA_SHORT: u8 = 255;
pub const XLR_BLOCK_ID_DATA_LONG: u8 = 254;
pub const XLR_BLOCK_ID_ORIGIN: u8 = 253;
pub const XLR_BLOCK_ID_TOPLEVEL_XID: u8 = 252;

/// `fork_flags` bits (`BKPBLOCK_*`).
pub const BKPBLOCK_FORK_MASK: u8 = 0x0F;
pub const BKPBLOCK_HAS_IMAGE: u8 = 0x10;
pub const BKPBLOCK_HAS_DATA: u8 = 0x20;
pub const BKPBLOCK_WILL_INIT: u8 = 0x40;
pub const BKPBLOCK_SAME_REL: u8 = 0x80;

/// The fields of the 24-byte `XLogRecord` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XLogRecordHeader {
    pub tot_len: u32,
    pub xid: u32,
    pub prev: Lsn,
    pub info: u8,
    pub rmid: u8,
    pub crc: u32,
}

impl XLogRecordHeader {
    /// Decode the first 24 bytes of `b`. Panics on a shorter slice.
    pub fn decode(b: &[u8]) -> XLogRecordHeader {
        let b = &b[..XLOG_RECORD_HEADER_LEN];
        XLogRecordHeader {
            tot_len: u32::from_le_bytes(b[0..4].try_into().unwrap()),
            xid: u32::from_le_bytes(b[4..8].try_into().unwrap()),
            prev: Lsn(u64::from_le_bytes(b[8..16].try_into().unwrap())),
            info: b[16],
            rmid: b[17],
            crc: u32::from_le_bytes(b[20..24].try_into().unwrap()),
        }
    }
}

/// A block reference's sub-header, before its payload is attached.
struct BlockHeader {
    id: u8,
    tag: BlockTag,
    fork_flags: u8,
    data_len: usize,
    image: Option<ImageHeader>,
}

/// Everything between the record header and the payload.
struct SubHeaders {
    blocks: Vec<BlockHeader>,
    origin: Option<u16>,
    toplevel_xid: Option<u32>,
    main_data_len: usize,
    /// Bytes the sub-headers occupy.
    len: usize,
}

/// Decode the record that starts at `lsn`; `end_lsn` is where the next
/// record may start; `record` is exactly `xl_tot_len` bytes.
pub fn decode_record(
    lsn: Lsn,
    end_lsn: Lsn,
    record: Bytes,
    version: PgMajorVersion,
) -> Result<DecodedWalRecord, WalDecodeError> {
    let err = |msg: String| WalDecodeError { lsn, msg };
    if record.len() < XLOG_RECORD_HEADER_LEN {
        return Err(err(format!("record of {} bytes is shorter than its header", record.len())));
    }
    let header = XLogRecordHeader::decode(&record);
    if header.tot_len as usize != record.len() {
        return Err(err(format!(
            "xl_tot_len {} but {} record bytes",
            header.tot_len,
            record.len()
        )));
    }
    let body = &record[XLOG_RECORD_HEADER_LEN..];
    let subs = parse_sub_headers(body, version).map_err(err)?;
    let payload_len = subs
        .blocks
        .iter()
        .map(|b| b.data_len + b.image.map_or(0, |i| i.stored_len as usize))
        .sum::<usize>()
        + subs.main_data_len;
    if subs.len + payload_len != body.len() {
        return Err(err(format!(
            "sub-headers ({} bytes) and payload ({payload_len} bytes) do not add up to xl_tot_len {}",
            subs.len, header.tot_len
        )));
    }
    let mut offset = XLOG_RECORD_HEADER_LEN + subs.len;
    let mut blocks = Vec::with_capacity(subs.blocks.len());
    for block in &subs.blocks {
        let (decoded, next) = attach_payload(&record, offset, block).map_err(err)?;
        blocks.push(decoded);
        offset = next;
    }
    let main_data = record.slice(offset..offset + subs.main_data_len);
    debug_assert_eq!(offset + subs.main_data_len, record.len());
    Ok(DecodedWalRecord {
        lsn,
        end_lsn,
        xid: header.xid,
        info: header.info,
        rmid: header.rmid,
        prev_lsn: header.prev,
        toplevel_xid: subs.toplevel_xid,
        origin: subs.origin,
        blocks,
        main_data,
    })
}

/// Slice the image and data of `block` out of `record` at `offset`;
/// returns the block and the offset after its payload.
fn attach_payload(
    record: &Bytes,
    offset: usize,
    block: &BlockHeader,
) -> Result<(DecodedBlock, usize), String> {
    let mut at = offset;
    let mut image = None;
    if let Some(h) = &block.image {
        let stored = record.slice(at..at + h.stored_len as usize);
        at += h.stored_len as usize;
        image = Some(BlockImage::new(*h, stored));
    }
    let data = record.slice(at..at + block.data_len);
    at += block.data_len;
    let decoded = DecodedBlock {
        id: block.id,
        tag: block.tag,
        will_init: block.fork_flags & BKPBLOCK_WILL_INIT != 0,
        image,
        apply_image: block.image.is_some_and(|h| h.apply),
        data,
    };
    Ok((decoded, at))
}

/// A little-endian reader over the sub-headers; errors name the offset.
struct Cursor<'a> {
    buf: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let bytes = self.buf.get(self.at..self.at + N).ok_or_else(|| {
            format!(
                "sub-headers truncated at byte {} of the record",
                XLOG_RECORD_HEADER_LEN + self.at
            )
        })?;
        self.at += N;
        Ok(bytes.try_into().expect("N bytes"))
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(self.take()?))
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take()?))
    }
}

/// Parse sub-headers until the main-data header, or until the bytes left
/// are all payload (a record without main data).
fn parse_sub_headers(body: &[u8], version: PgMajorVersion) -> Result<SubHeaders, String> {
    let mut cur = Cursor { buf: body, at: 0 };
    let mut subs = SubHeaders {
        blocks: Vec::new(),
        origin: None,
        toplevel_xid: None,
        main_data_len: 0,
        len: 0,
    };
    let mut payload_len = 0usize;
    while body.len() - cur.at > payload_len {
        match cur.u8()? {
            XLR_BLOCK_ID_DATA_SHORT => {
                subs.main_data_len = cur.u8()? as usize;
                break;
            }
            XLR_BLOCK_ID_DATA_LONG => {
                subs.main_data_len = cur.u32()? as usize;
                break;
            }
            XLR_BLOCK_ID_ORIGIN => subs.origin = Some(cur.u16()?),
            XLR_BLOCK_ID_TOPLEVEL_XID => subs.toplevel_xid = Some(cur.u32()?),
            id if id <= XLR_MAX_BLOCK_ID => {
                let block = parse_block_header(&mut cur, id, subs.blocks.last(), version)?;
                payload_len += block.data_len + block.image.map_or(0, |i| i.stored_len as usize);
                subs.blocks.push(block);
            }
            id => return Err(format!("invalid block id {id}")),
        }
    }
    subs.len = cur.at;
    Ok(subs)
}

/// One block reference header (the id byte already read).
fn parse_block_header(
    cur: &mut Cursor<'_>,
    id: u8,
    previous: Option<&BlockHeader>,
    version: PgMajorVersion,
) -> Result<BlockHeader, String> {
    if let Some(prev) = previous {
        if id <= prev.id {
            return Err(format!("block id {id} after block id {}: out of order", prev.id));
        }
    }
    let fork_flags = cur.u8()?;
    let data_len = cur.u16()? as usize;
    let has_data = fork_flags & BKPBLOCK_HAS_DATA != 0;
    if has_data != (data_len != 0) {
        return Err(format!(
            "block {id}: BKPBLOCK_HAS_DATA is {has_data} but data length is {data_len}"
        ));
    }
    let mut image = None;
    if fork_flags & BKPBLOCK_HAS_IMAGE != 0 {
        image = Some(parse_image_header(cur, id, version)?);
    }
    let fork = fork_flags & BKPBLOCK_FORK_MASK;
    let (spc_oid, db_oid, rel_number) = if fork_flags & BKPBLOCK_SAME_REL != 0 {
        let prev = previous
            .ok_or_else(|| format!("block {id}: BKPBLOCK_SAME_REL without a previous block"))?;
        (prev.tag.spc_oid, prev.tag.db_oid, prev.tag.rel_number)
    } else {
        (cur.u32()?, cur.u32()?, cur.u32()?)
    };
    let blkno = cur.u32()?;
    let tag = BlockTag { spc_oid, db_oid, rel_number, fork, blkno };
    Ok(BlockHeader { id, tag, fork_flags, data_len, image })
}

fn parse_image_header(
    cur: &mut Cursor<'_>,
    id: u8,
    version: PgMajorVersion,
) -> Result<ImageHeader, String> {
    let stored_len = cur.u16()?;
    let hole_offset = cur.u16()?;
    let info = cur.u8()?;
    let bits = super::image::image_info_bits(version);
    let compressed = info & (bits.pglz | bits.lz4 | bits.zstd) != 0;
    let hole_length = if compressed && info & bits.has_hole != 0 { Some(cur.u16()?) } else { None };
    let header = ImageHeader::new(version, stored_len, hole_offset, info, hole_length)
        .map_err(|e| format!("block {id}: {e}"))?;
    debug_assert!(compressed == (header.compression != ImageCompression::None));
    Ok(header)
}

#[cfg(test)]
mod tests;
