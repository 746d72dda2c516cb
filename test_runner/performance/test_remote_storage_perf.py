"""Remote storage measured against the object store's own client (the AWS
CLI, `aws s3 cp`) in the same run, on the same MinIO and the same files.

pgbench scale 100 (scale 10 with --perf-smoke) is imported into a
pageserver whose remote storage is MinIO (background compaction off). The
import writes its large relation files as image layers of
`compaction_target_size` (128 MiB) and the rest as one small L0, which a
forced compaction then rewrites as L1: the shape a tenant has in steady
state.

- Upload: from the import's answer until `remote_consistent_lsn` reaches
  `disk_consistent_lsn` (every layer of the import), against `aws s3 cp
  --recursive` of the same layer files (hard links in a staging directory)
  to another prefix of the bucket.
- Download: an empty pageserver attaches the tenant (generation 2); from
  the attach request until every layer is on its disk (the attach's
  background prefetch, two layers at a time), against `aws s3 cp
  --recursive` of the same objects to a local directory followed by
  `sync` (the pageserver fsyncs every file it downloads); with the
  attaching daemon's peak RSS (it must not grow with the data).
- Time to first page: an empty pageserver attaches the compacted tenant;
  from the attach request until a GetPage of a block in the middle of
  pgbench_accounts is answered (and equals the backup's page), against the
  same GetPage on the pageserver that has the layers on its disk (median
  of 21), and `aws s3 cp` of the index and of the layer objects whose key
  range holds that block (what the read needs at least).

Figures go to test_output/perf/remote_storage.json and the summary.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from fixtures.compare import ImportedTimeline
from fixtures.pageserver import TEST_OUTPUT
from fixtures.pagestream import GetPageResponse
from fixtures.utils import process_memory_mb
from fixtures.remote import (
    key_of,
    layers_holding,
    local_layers,
    newest_index,
    remote_pageserver,
    timeline_prefix,
    wait_uploaded,
)

pytestmark = pytest.mark.perf

MIB = 1 << 20


@pytest.fixture
def bench_backup(request):
    """Scale 100, or scale 10 in the smoke run."""
    name = "pgbench_backup" if request.config.getoption("--perf-smoke") else "pgbench_s100_backup"
    return request.getfixturevalue(name)


def record(request, title: str, rows: list[dict]) -> None:
    out = TEST_OUTPUT / "perf"
    out.mkdir(parents=True, exist_ok=True)
    path = out / "remote_storage.json"
    saved = json.loads(path.read_text()) if path.exists() else {}
    saved[title] = rows
    path.write_text(json.dumps(saved, indent=2))
    request.config.perf_summaries.append((title, "\n".join(json.dumps(r) for r in rows)))


def import_and_upload(pageserver_factory, minio, backup) -> tuple:
    """(pageserver, timeline, seconds the upload took after the import)."""
    ps = remote_pageserver(pageserver_factory, minio, "ps1", compaction_period="0 s")
    http = ps.http_client()
    tl = ImportedTimeline(http.tenant_create(), os.urandom(16).hex())
    http.import_basebackup(tl.tenant_id, tl.timeline_id, str(backup.path), timeout=1800)
    started = time.monotonic()
    wait_uploaded(http, tl.tenant_id, tl.timeline_id, timeout=1800)
    return ps, tl, time.monotonic() - started


def compact_and_upload(ps, minio, tl: ImportedTimeline) -> dict:
    """Forced compaction of the import's L0 into L1s; the index listing
    them (and the import's image layers), once it is in the bucket."""
    http = ps.http_client()
    report = http.timeline_compact(tl.tenant_id, tl.timeline_id, force_l0=True)
    deadline = time.monotonic() + 1800
    while True:
        levels = [layer["level"] for layer in newest_index(minio, tl.tenant_id, tl.timeline_id)["layers"].values()]
        if "L0" not in levels and levels.count("L1") == report["l1_layers_written"]:
            return newest_index(minio, tl.tenant_id, tl.timeline_id)
        assert time.monotonic() < deadline, f"the L1s of {report} not uploaded after 1800 s"
        time.sleep(0.02)


def aws_upload(minio, ps, tl: ImportedTimeline, names, staging: Path, dest: str) -> float:
    """Seconds of `aws s3 cp` of the layer files `names` (hard-linked into
    `staging`) to `dest` under the bucket."""
    staging.mkdir()
    tl_dir = ps.workdir / "tenants" / tl.tenant_id / "timelines" / tl.timeline_id
    for name in names:
        os.link(tl_dir / name, staging / name)
    target = f"s3://{minio.bucket}/{dest}/"
    if len(names) == 1:
        return timed(minio.aws_cli, "s3", "cp", "--quiet", str(staging / names[0]), target)
    return timed(minio.aws_cli, "s3", "cp", "--recursive", "--quiet", str(staging), target)


def timed(fn, *args) -> float:
    started = time.monotonic()
    fn(*args)
    return time.monotonic() - started


def wait_resident(ps, tl: ImportedTimeline, layers: dict[str, dict], timeout: float = 1800) -> None:
    """Until every layer of the index is on the pageserver's disk, whole."""
    deadline = time.monotonic() + timeout
    want = {name: layer["file_size"] for name, layer in layers.items()}
    while True:
        have = local_layers(ps, tl.tenant_id, tl.timeline_id)
        missing = [n for n, size in want.items() if have.get(n) != size]
        if not missing:
            return
        assert time.monotonic() < deadline, f"{len(missing)} of {len(want)} layers not resident after {timeout}s"
        time.sleep(0.02)


def throughput_row(what: str, files: int, total: int, ours_s: float, aws_s: float) -> dict:
    mib = total / MIB
    return {"transfer": what, "files": files, "mib": round(mib, 1), "pageserver_mib_s": round(mib / ours_s, 1),
            "aws_cli_mib_s": round(mib / aws_s, 1), "of_aws_cli": round(aws_s / ours_s, 2)}  # fmt: skip


def test_upload_download_throughput(pageserver_factory, minio, bench_backup, test_output_dir, request):
    ps1, tl, upload_s = import_and_upload(pageserver_factory, minio, bench_backup)
    imported = newest_index(minio, tl.tenant_id, tl.timeline_id)["layers"]
    assert local_layers(ps1, tl.tenant_id, tl.timeline_id) == {n: layer["file_size"] for n, layer in imported.items()}
    aws_up_s = aws_upload(minio, ps1, tl, sorted(imported), test_output_dir / "staging", "baseline/layers")
    imported_bytes = sum(layer["file_size"] for layer in imported.values())

    layers = compact_and_upload(ps1, minio, tl)["layers"]
    layer_bytes = sum(layer["file_size"] for layer in layers.values())
    # The baseline downloads the same objects: the attach's layers under their own prefix.
    aws_upload(minio, ps1, tl, sorted(layers), test_output_dir / "staging_attach", "baseline/attach")
    ps1.stop()

    ps2 = remote_pageserver(pageserver_factory, minio, "ps2")
    started = time.monotonic()
    ps2.http_client().tenant_attach(tl.tenant_id, 2)
    wait_resident(ps2, tl, layers)
    download_s = time.monotonic() - started
    attach_peak_mb = process_memory_mb(ps2.proc.pid)["VmHWM"]
    ps2.stop()

    dest = test_output_dir / "aws_down"
    src = f"s3://{minio.bucket}/baseline/attach/"

    def aws_down():
        minio.aws_cli("s3", "cp", "--recursive", "--quiet", src, str(dest))
        subprocess.run(["sync"], check=True)

    aws_down_s = timed(aws_down)
    assert sorted(p.name for p in dest.iterdir()) == sorted(layers)
    rows = [
        throughput_row("upload of the import's layers", len(imported), imported_bytes, upload_s, aws_up_s),
        throughput_row("download of every layer at attach", len(layers), layer_bytes, download_s, aws_down_s)
        | {"pageserver_peak_rss_mb": attach_peak_mb},
    ]
    record(request, "remote storage upload and download", rows)


def first_page(ps, tl: ImportedTimeline, rel, blkno: int, timeout: float = 600) -> GetPageResponse:
    """GetPage@latest, retried (new session) until the attached timeline
    answers it with a page."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with ps.pagestream(tl.tenant_id, tl.timeline_id) as c:
                resp = c.get_page(rel, blkno)
            if isinstance(resp, GetPageResponse):
                return resp
            last = resp
        except Exception as e:  # noqa: BLE001 - the timeline may still be loading
            last = e
        assert time.monotonic() < deadline, f"no page {timeout}s after the attach: {last}"
        time.sleep(0.01)


def test_time_to_first_page(pageserver_factory, minio, bench_backup, test_output_dir, request):
    ps1, tl, _ = import_and_upload(pageserver_factory, minio, bench_backup)
    index = compact_and_upload(ps1, minio, tl)
    rel = max(bench_backup.relations, key=bench_backup.nblocks)  # pgbench_accounts
    blkno = bench_backup.nblocks(rel) // 2
    with tarfile.open(bench_backup.path) as tar:
        expected = next(p for b, p in bench_backup.read_blocks(tar, rel) if b == blkno)
    warm_s = []
    with ps1.pagestream(tl.tenant_id, tl.timeline_id) as c:
        c.get_page(rel, blkno)
        for _ in range(21):
            started = time.perf_counter()
            warm = c.get_page(rel, blkno)
            warm_s.append(time.perf_counter() - started)
            assert isinstance(warm, GetPageResponse) and warm.page == expected
    ps1.stop()
    needed = layers_holding(index, key_of(rel, blkno))
    assert needed, "no layer of the index holds the block"

    ps2 = remote_pageserver(pageserver_factory, minio, "ps2")
    started = time.perf_counter()
    ps2.http_client().tenant_attach(tl.tenant_id, 2)
    attach_s = time.perf_counter() - started
    resp = first_page(ps2, tl, rel, blkno)
    first_s = time.perf_counter() - started
    resident = local_layers(ps2, tl.tenant_id, tl.timeline_id)
    assert resp.page == expected, "the first page differs from the backup's"
    ps2.stop()

    src = f"s3://{minio.bucket}/{timeline_prefix(tl.tenant_id, tl.timeline_id)}"
    filters = ["--exclude", "*", "--include", "index_part.json-*"]
    for name in needed:
        filters += ["--include", f"{name}-*"]
    aws_s = timed(minio.aws_cli, "s3", "cp", "--recursive", "--quiet", src, str(test_output_dir / "aws_first"), *filters)
    needed_mib = sum(index["layers"][n]["file_size"] for n in needed) / MIB
    rows = [{
        "layers": len(index["layers"]), "needed_layers": len(needed), "needed_mib": round(needed_mib, 1),
        "attach_ms": round(attach_s * 1000, 1), "first_page_ms": round(first_s * 1000, 1),
        "resident_at_first_page": len(resident), "warm_getpage_ms_median": round(statistics.median(warm_s) * 1000, 3),
        "aws_cli_needed_ms": round(aws_s * 1000, 1), "of_aws_cli": round(aws_s / first_s, 2),
    }]  # fmt: skip
    record(request, "remote storage time to first page", rows)
