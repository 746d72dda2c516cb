#!/usr/bin/env python3
"""Where a depth-1 GetPage spends its time, hop by hop, from syscalls.

Traces a running daemon with `perf trace` while one client (pagebench at
queue depth 1) reads, and splits every request/response cycle on the
connection's socket into hops between the syscalls that bound them:

  wake      the socket's epoll readiness (epoll_wait returning) -> the read
            of the request (only when the thread had parked)
  plan      the read of the request returned -> the first storage read
            (frame parsed, batch formed, executor run, keys planned)
  storage   the first storage read -> the last one returned (pread64 or
            io_uring_enter: layer and index blocks)
  answer    the last storage read returned -> the response's write started
            (page reconstructed, response encoded); with no storage read,
            the read of the request -> the write
  write     the write of the response (a syscall)
  client    the response written -> the next request read returned
            (network, the client, the daemon's wake-up)

Each hop's median (and p90) over the cycles is printed, in microseconds.
The syscall tracer adds a few microseconds to every syscall: compare
builds traced the same way, not a traced build with an untraced figure.

Usage (the daemon and pagebench running, one client at depth 1):
    getpage_hops.py --pid $(pgrep -f 'pageserver --workdir X') --seconds 3
or, from a saved trace: getpage_hops.py --trace-file trace.txt
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from dataclasses import dataclass

SYSCALLS = "read,recvfrom,readv,write,sendto,writev,sendmsg,pread64,preadv,io_uring_enter,epoll_wait,epoll_pwait"
LINE_RE = re.compile(r"^\s*(?P<ts>[\d.]+) \(\s*(?P<dur>[\d.]+) ms\): \S+/(?P<tid>\d+) (?P<call>\w+)\((?P<args>.*)\)\s+= (?P<ret>-?\d+)")
FD_RE = re.compile(r"fd: (\d+)")
SOCKET_READS = {"read", "recvfrom", "readv"}
SOCKET_WRITES = {"write", "sendto", "writev", "sendmsg"}
STORAGE = {"pread64", "preadv", "io_uring_enter"}
EPOLL = {"epoll_wait", "epoll_pwait"}
PAGE = 8192


@dataclass
class Call:
    start_us: float
    end_us: float
    tid: int
    name: str
    fd: int | None
    ret: int


def parse(lines) -> list[Call]:
    calls = []
    for line in lines:
        m = LINE_RE.match(line)
        if not m:
            continue
        start = float(m["ts"]) * 1000
        fd = FD_RE.search(m["args"])
        calls.append(Call(start, start + float(m["dur"]) * 1000, int(m["tid"]), m["call"],
                          int(fd.group(1)) if fd else None, int(m["ret"])))  # fmt: skip
    return sorted(calls, key=lambda c: c.start_us)


def connection_fd(calls: list[Call]) -> int:
    """The socket that responses (writes of at least a page) go to."""
    counts: dict[int, int] = {}
    for c in calls:
        if c.name in SOCKET_WRITES and c.ret >= PAGE and c.fd is not None:
            counts[c.fd] = counts.get(c.fd, 0) + 1
    if not counts:
        sys.exit("no write of a page-sized response in the trace: is a client reading?")
    return max(counts, key=counts.get)


def hops(calls: list[Call], fd: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {h: [] for h in ("wake", "plan", "storage", "answer", "write", "client")}
    request = None  # the read of the current request
    storage: list[Call] = []
    last_epoll = None
    last_write_end = None
    for c in calls:
        if c.name in EPOLL and c.ret > 0:
            last_epoll = c
        elif c.name in SOCKET_READS and c.fd == fd and c.ret > 0:
            if last_write_end is not None:
                out["client"].append(c.end_us - last_write_end)
            if last_epoll is not None and last_epoll.end_us <= c.start_us and request is None:
                out["wake"].append(c.start_us - last_epoll.end_us)
            request, storage, last_epoll = c, [], None
        elif c.name in STORAGE and request is not None:
            storage.append(c)
        elif c.name in SOCKET_WRITES and c.fd == fd and c.ret >= PAGE and request is not None:
            if storage:
                out["plan"].append(storage[0].start_us - request.end_us)
                out["storage"].append(storage[-1].end_us - storage[0].start_us)
                out["answer"].append(c.start_us - storage[-1].end_us)
            else:
                out["answer"].append(c.start_us - request.end_us)
            out["write"].append(c.end_us - c.start_us)
            last_write_end, request = c.end_us, None
    return out


def table(h: dict[str, list[float]]) -> str:
    lines = ["| hop | cycles | median (µs) | p90 (µs) |", "|---|---|---|---|"]
    for name, xs in h.items():
        if xs:
            p90 = sorted(xs)[int(len(xs) * 0.9)]
            lines.append(f"| {name} | {len(xs)} | {statistics.median(xs):.1f} | {p90:.1f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pid", type=int, help="the daemon to trace")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--trace-file", help="parse a saved `perf trace` output instead")
    ap.add_argument("--save", help="also write the raw trace here")
    args = ap.parse_args()
    if args.trace_file:
        with open(args.trace_file) as f:
            text = f.read()
    elif args.pid:
        cmd = ["timeout", "-s", "INT", str(args.seconds), "perf", "trace", "-e", SYSCALLS, "-p", str(args.pid)]
        res = subprocess.run(cmd, capture_output=True, text=True)
        text = res.stderr + res.stdout
    else:
        ap.error("--pid or --trace-file")
    if args.save:
        with open(args.save, "w") as f:
            f.write(text)
    calls = parse(text.splitlines())
    if not calls:
        sys.exit(f"no syscalls in the trace: {text[-2000:]}")
    print(table(hops(calls, connection_fd(calls))))


if __name__ == "__main__":
    main()
