//! The record dump format of `wal_rmgr_real.rs` (one record a line, space
//! separated: start LSN, rmid, xl_info, xid, block refs
//! `id:spc:db:rel:fork:blkno:has_image` joined by commas or `-`, main data
//! in hex or `-`), shared with the `classify_dump` example.

use bytes::Bytes;
use postgres_ffi::wal::image::BlockImage;
use postgres_ffi::wal::{BlockTag, DecodedBlock, DecodedWalRecord};
use utils::lsn::Lsn;

fn hex(s: &str) -> Vec<u8> {
    if s == "-" {
        return Vec::new();
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn block(s: &str) -> DecodedBlock {
    let f: Vec<u32> = s.split(':').map(|x| x.parse().unwrap()).collect();
    DecodedBlock {
        id: f[0] as u8,
        tag: BlockTag {
            spc_oid: f[1],
            db_oid: f[2],
            rel_number: f[3],
            fork: f[4] as u8,
            blkno: f[5],
        },
        will_init: false,
        image: (f[6] == 1).then(|| BlockImage::uncompressed(Bytes::from(vec![0u8; 8192]))),
        apply_image: f[6] == 1,
        data: Bytes::new(),
    }
}

pub fn parse_line(line: &str) -> DecodedWalRecord {
    let f: Vec<&str> = line.split(' ').collect();
    let lsn = Lsn(f[0].parse().unwrap());
    DecodedWalRecord {
        lsn,
        end_lsn: lsn,
        xid: f[3].parse().unwrap(),
        info: f[2].parse().unwrap(),
        rmid: f[1].parse().unwrap(),
        prev_lsn: Lsn(0),
        toplevel_xid: None,
        origin: None,
        blocks: if f[4] == "-" { Vec::new() } else { f[4].split(',').map(block).collect() },
        main_data: Bytes::from(hex(f[5])),
    }
}
