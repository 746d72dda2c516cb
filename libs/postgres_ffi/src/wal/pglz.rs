//! Decompressor for PostgreSQL's own LZ format (`pg_lzcompress.c`), used
//! for full-page images when `wal_compression = pglz` (or `on`).
//!
//! Format (facts from PostgreSQL's description of it): the input is a
//! sequence of groups, each a control byte followed by up to 8 items, one
//! per control bit, least significant bit first. A clear bit is one literal
//! byte. A set bit is a back-reference tag of 2 or 3 bytes: the first byte
//! holds the high 4 bits of a 12-bit offset (upper nibble) and the length
//! minus 3 (lower nibble); the second byte holds the low 8 bits of the
//! offset; a length nibble of 15 means a third byte follows whose value is
//! added to 18. A tag copies `length` bytes starting `offset` bytes back in
//! the output; source and destination may overlap (a run repeats).
//!
//! Invariants: never reads or writes out of bounds, whatever the input;
//! succeeds only when the output is filled exactly and the input consumed
//! exactly (PostgreSQL's `check_complete`).

/// Why a pglz stream was rejected; `at` is the input offset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PglzError {
    #[error("pglz: tag truncated at input offset {at}")]
    TruncatedTag { at: usize },
    #[error("pglz: back-reference offset {offset} at input offset {at} reaches before the output start ({written} bytes written)")]
    BadOffset { at: usize, offset: usize, written: usize },
    #[error(
        "pglz: produced {produced} of {expected} bytes, consumed {consumed} of {input} input bytes"
    )]
    Incomplete { produced: usize, expected: usize, consumed: usize, input: usize },
}

/// Decompress `src` into exactly `dst.len()` bytes.
pub fn pglz_decompress(src: &[u8], dst: &mut [u8]) -> Result<(), PglzError> {
    let mut sp = 0;
    let mut dp = 0;
    while sp < src.len() && dp < dst.len() {
        let control = src[sp];
        sp += 1;
        for bit in 0..8 {
            if sp >= src.len() || dp >= dst.len() {
                break;
            }
            if control & (1 << bit) == 0 {
                dst[dp] = src[sp];
                sp += 1;
                dp += 1;
                continue;
            }
            let (offset, len, tag_len) = read_tag(src, sp)?;
            if offset == 0 || offset > dp {
                return Err(PglzError::BadOffset { at: sp, offset, written: dp });
            }
            sp += tag_len;
            let len = len.min(dst.len() - dp);
            copy_back_reference(dst, dp, offset, len);
            dp += len;
        }
    }
    if dp != dst.len() || sp != src.len() {
        return Err(PglzError::Incomplete {
            produced: dp,
            expected: dst.len(),
            consumed: sp,
            input: src.len(),
        });
    }
    Ok(())
}

/// Decode the tag at `src[at..]`: (offset, length, bytes the tag occupies).
fn read_tag(src: &[u8], at: usize) -> Result<(usize, usize, usize), PglzError> {
    let truncated = PglzError::TruncatedTag { at };
    let (&t1, &t2) = match (src.get(at), src.get(at + 1)) {
        (Some(t1), Some(t2)) => (t1, t2),
        _ => return Err(truncated),
    };
    let offset = (((t1 & 0xF0) as usize) << 4) | t2 as usize;
    let len_nibble = (t1 & 0x0F) as usize;
    if len_nibble != 0x0F {
        return Ok((offset, len_nibble + 3, 2));
    }
    let extra = *src.get(at + 2).ok_or(truncated)? as usize;
    Ok((offset, 18 + extra, 3))
}

/// Append `len` bytes at `dst[dp..]` copied from `offset` bytes back. When
/// `offset < len` the copy reads bytes it has itself just written; copying
/// in non-overlapping steps of `offset`, `2 * offset`, ... gives the same
/// result as a byte-by-byte copy.
fn copy_back_reference(dst: &mut [u8], dp: usize, offset: usize, len: usize) {
    debug_assert!(offset >= 1 && offset <= dp && dp + len <= dst.len());
    let from = dp - offset;
    let mut done = 0;
    let mut step = offset;
    while len - done > step {
        dst.copy_within(from..from + step, dp + done);
        done += step;
        step *= 2;
    }
    dst.copy_within(from..from + (len - done), dp + done);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_and_overlapping_run() {
        // "ab" as literals, then a tag: offset 2, length 6 -> "abababab".
        let src = [0b0000_0100, b'a', b'b', 0x03, 0x02];
        let mut out = [0u8; 8];
        pglz_decompress(&src, &mut out).unwrap();
        assert_eq!(&out, b"abababab");
    }

    #[test]
    fn long_tag_with_extension_byte() {
        // "x", then offset 1, length 18 + 100.
        let src = [0b0000_0010, b'x', 0x0F, 0x01, 100];
        let mut out = [0u8; 119];
        pglz_decompress(&src, &mut out).unwrap();
        assert!(out.iter().all(|&b| b == b'x'));
    }

    #[test]
    fn rejects_bad_streams() {
        let mut out = [0u8; 8];
        // Back-reference before the start of the output.
        assert!(matches!(
            pglz_decompress(&[0x01, 0x00, 0x05], &mut out),
            Err(PglzError::BadOffset { .. })
        ));
        // Truncated tag.
        assert!(matches!(
            pglz_decompress(&[0x02, b'a', 0x0F, 0x01], &mut out),
            Err(PglzError::TruncatedTag { .. })
        ));
        // Too short an output.
        assert!(matches!(
            pglz_decompress(&[0x00, b'a'], &mut out),
            Err(PglzError::Incomplete { .. })
        ));
        // Input left over once the output is full.
        let mut one = [0u8; 1];
        assert!(matches!(
            pglz_decompress(&[0x00, b'a', b'b'], &mut one),
            Err(PglzError::Incomplete { .. })
        ));
    }
}
