"""The `minio` fixture against a real MinIO server: objects round-trip through
boto3 and the AWS CLI, a stopped server refuses connections, and a restart on
the same directory and port keeps every object."""

from __future__ import annotations

import boto3
import botocore.exceptions
import pytest
import requests

from fixtures.minio import MINIO_VERSION, MinioNotInstalled, MinioServer
from fixtures.pageserver import REPO_ROOT
from fixtures.utils import PortDistributor


def test_objects_and_outage(minio: MinioServer):
    bucket = minio.bucket
    assert bucket is not None and minio.list_keys(bucket) == []

    minio.put(bucket, "tenants/a/layer-1", b"first")
    minio.put(bucket, "tenants/a/layer-2", b"\x00\xff" * 100_000)
    minio.put(bucket, "tenants/b/index_part.json", b"{}")
    assert minio.get(bucket, "tenants/a/layer-1") == b"first"
    assert minio.get(bucket, "tenants/a/layer-2") == b"\x00\xff" * 100_000
    assert minio.list_keys(bucket, "tenants/a/") == ["tenants/a/layer-1", "tenants/a/layer-2"]
    assert minio.list_keys(bucket) == ["tenants/a/layer-1", "tenants/a/layer-2", "tenants/b/index_part.json"]

    minio.delete(bucket, "tenants/a/layer-1")
    assert minio.list_keys(bucket, "tenants/") == ["tenants/a/layer-2", "tenants/b/index_part.json"]
    with pytest.raises(botocore.exceptions.ClientError) as e:
        minio.get(bucket, "tenants/a/layer-1")
    assert e.value.response["Error"]["Code"] == "NoSuchKey"

    # Outage: the process is gone, connections are refused.
    minio.stop()
    assert not minio.is_running()
    with pytest.raises(botocore.exceptions.EndpointConnectionError):
        minio.client(max_attempts=1).get_object(Bucket=bucket, Key="tenants/b/index_part.json")
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{minio.endpoint}/minio/health/live", timeout=2)

    # Back on the same directory and port, with every object.
    minio.start()
    assert minio.endpoint == f"http://127.0.0.1:{minio.port}"
    assert minio.list_keys(bucket) == ["tenants/a/layer-2", "tenants/b/index_part.json"]
    assert minio.get(bucket, "tenants/a/layer-2") == b"\x00\xff" * 100_000
    assert "===== start" in minio.log_path.read_text()


def test_env_and_aws_cli(minio: MinioServer, tmp_path):
    env = minio.env()
    assert env == {
        "AWS_ACCESS_KEY_ID": minio.access_key,
        "AWS_SECRET_ACCESS_KEY": minio.secret_key,
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
    }
    assert minio.remote_storage(minio.bucket, prefix="ps") == {
        "endpoint": minio.endpoint, "bucket": minio.bucket, "region": "us-east-1", "prefix": "ps",
    }  # fmt: skip

    src = tmp_path / "src.bin"
    src.write_bytes(bytes(range(256)) * 4096)
    minio.aws_cli("s3", "cp", str(src), f"s3://{minio.bucket}/copy/src.bin")
    assert minio.get(minio.bucket, "copy/src.bin") == src.read_bytes()
    back = tmp_path / "back.bin"
    minio.aws_cli("s3", "cp", f"s3://{minio.bucket}/copy/src.bin", str(back))
    assert back.read_bytes() == src.read_bytes()

    # Wrong credentials are refused.
    wrong = boto3.client(
        "s3", endpoint_url=minio.endpoint, region_name="us-east-1",
        aws_access_key_id=minio.access_key, aws_secret_access_key="not-the-secret",
    )  # fmt: skip
    with pytest.raises(botocore.exceptions.ClientError) as e:
        wrong.list_objects_v2(Bucket=minio.bucket)
    assert e.value.response["Error"]["Code"] == "SignatureDoesNotMatch"


def test_missing_binary_names_install_script(monkeypatch, tmp_path):
    monkeypatch.setenv("MINIO_BIN", str(tmp_path / "no-minio"))
    server = MinioServer(tmp_path / "minio", PortDistributor())
    with pytest.raises(MinioNotInstalled, match="scripts/install-test-deps.sh"):
        server.start()
    assert not server.is_running()


def test_version_pin_matches_scripts():
    for script in ("scripts/install-test-deps.sh", "run-tests.sh"):
        assert MINIO_VERSION in (REPO_ROOT / script).read_text(), f"{script} pins another MinIO version"
