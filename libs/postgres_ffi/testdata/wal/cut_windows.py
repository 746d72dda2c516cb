#!/usr/bin/env python3
"""Cut fixture windows out of a stopped cluster's pg_wal (see make_fixtures.sh).

usage: cut_windows.py PG_WAL_DIR RECORDS_TSV OUT_PREFIX

RECORDS_TSV is pg_get_wal_records_info() output (start, end, prev, xid,
rmgr, type, record_length, main_data_length, fpi_length, block_ref).
Writes OUT_PREFIX-seg.{wal.zst,tsv} and OUT_PREFIX-switch.{wal.zst,tsv}.
"""
import os
import re
import subprocess
import sys

SEG = 16 * 1024 * 1024
PAGE = 8192
BEFORE = 512 * 1024
AFTER = 512 * 1024


def lsn(text):
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def fmt(value):
    return "%X/%X" % (value >> 32, value & 0xFFFFFFFF)


WALDUMP_LINE = re.compile(
    r"rmgr: (\S+)\s+len \(rec/tot\):\s*(\d+)/\s*(\d+), tx:\s*(\d+), "
    r"lsn: ([0-9A-F]+/[0-9A-F]+), prev:? ([0-9A-F]+/[0-9A-F]+), desc: (\S*)(.*)$")


def read_waldump(path):
    """pg_waldump's text: no end LSN and no main data length (None)."""
    records = []
    with open(path) as f:
        for line in f:
            m = WALDUMP_LINE.match(line)
            assert m, line
            rec_len, tot_len = int(m.group(2)), int(m.group(3))
            rest = m.group(8)
            records.append({
                "start": lsn(m.group(5)), "end": None, "prev": lsn(m.group(6)),
                "xid": int(m.group(4)), "rmgr": m.group(1), "type": m.group(7).rstrip(","),
                "len": tot_len, "main": None, "fpi": tot_len - rec_len,
                "blocks": rest.count("blkref #"), "images": rest.count("FPW"),
            })
    # The end is where the next record may start: derive it from the next
    # record's start only when they are on the same page (no header between).
    for r, nxt in zip(records, records[1:]):
        if r["start"] // PAGE == nxt["start"] // PAGE:
            r["end"] = nxt["start"]
    return records


def read_records(path):
    if path.endswith(".waldump"):
        return read_waldump(path)
    records = []
    with open(path) as f:
        for line in f:
            c = line.rstrip("\n").split("\t")
            refs = c[9]
            records.append({
                "start": lsn(c[0]), "end": lsn(c[1]), "prev": lsn(c[2]),
                "xid": int(c[3]), "rmgr": c[4], "type": c[5],
                "len": int(c[6]), "main": int(c[7]), "fpi": int(c[8]),
                "blocks": refs.count("blkref #"), "images": refs.count("FPW"),
            })
    return records


def opt(value, show):
    return "-" if value is None else show(value)


def read_wal(wal_dir, start, end):
    out = bytearray()
    pos = start
    while pos < end:
        segno = pos // SEG
        name = "%08X%08X%08X" % (1, segno // 256, segno % 256)
        upto = min(end, (segno + 1) * SEG)
        with open(os.path.join(wal_dir, name), "rb") as f:
            f.seek(pos % SEG)
            out += f.read(upto - pos)
        pos = upto
    assert len(out) == end - start
    return bytes(out)


def window_start(records, around):
    """A record start near `around - BEFORE`; the page boundary before it
    when the record is its page's first, so the window opens with a page
    header."""
    lo, hi = around - BEFORE - 128 * 1024, around - BEFORE + 128 * 1024
    for r in records:
        off = r["start"] % PAGE
        if lo <= r["start"] < hi and (off == 24 or (off == 40 and r["start"] % SEG == 40)):
            return r["start"] - off, r["start"]
    first = next(r for r in records if r["start"] >= around - BEFORE)
    return first["start"], first["start"]


def write_window(wal_dir, records, out, start, first_record, end):
    data = read_wal(wal_dir, start, end)
    subprocess.run(["zstd", "-q", "-19", "-f", "-o", out + ".wal.zst"], input=data, check=True)
    with open(out + ".tsv", "w") as f:
        f.write("# start\t%s\n" % fmt(start))
        f.write("# start_lsn\tend_lsn\tprev_lsn\txid\trmgr\ttype\ttot_len\tmain_len\tfpi_len\tblocks\timages\n")
        for r in records:
            r_end = r["end"] if r["end"] is not None else r["start"] + r["len"]
            if r["start"] >= first_record and r_end <= end:
                f.write("\t".join([fmt(r["start"]), opt(r["end"], fmt), fmt(r["prev"]), str(r["xid"]),
                                   r["rmgr"], r["type"], str(r["len"]), opt(r["main"], str),
                                   str(r["fpi"]), str(r["blocks"]), str(r["images"])]) + "\n")


def main():
    wal_dir, tsv, prefix = sys.argv[1:4]
    records = read_records(tsv)
    switch = next(r for r in records if r["rmgr"] == "XLOG" and r["type"] == "SWITCH")
    first_seg = records[0]["start"] // SEG + 1
    boundary = next(s * SEG for s in range(first_seg, first_seg + 1000)
                    if s * SEG - BEFORE > records[0]["start"]
                    and any(r["start"] < s * SEG < r["start"] + r["len"] for r in records))
    start, first = window_start(records, boundary)
    write_window(wal_dir, records, prefix + "-seg", start, first, boundary + AFTER)
    next_seg = (switch["start"] // SEG + 1) * SEG
    start, first = window_start(records, switch["start"] + 256 * 1024)
    write_window(wal_dir, records, prefix + "-switch", start, first, next_seg + AFTER // 2)


main()
