"""Configuration: the documented config file starts the daemon; `-c`
overrides win over the file; an unknown key or a bad value fails start-up
with a message that names the key."""

from __future__ import annotations

import pytest

from fixtures.pageserver import REPO_ROOT


@pytest.fixture
def unstarted(pageserver_factory):
    return pageserver_factory.create()


@pytest.mark.parametrize(
    "raw, key",
    [
        ("no_such_key=1", "no_such_key"),
        ('wait_lsn_timeout="banana"', "wait_lsn_timeout"),
        ("checkpoint_distance=true", "checkpoint_distance"),
        ('checkpoint_timeout="-5 s"', "checkpoint_timeout"),
        ("max_get_vectored_keys=0", "max_get_vectored_keys"),
        ("page_service_threads=-1", "page_service_threads"),
        ('io_engine="carrier-pigeon"', "io_engine"),
        ('log_format="xml"', "log_format"),
        ('listen_pg_addr="not an address"', "listen_pg_addr"),
        ('page_service_pipelining={ mode = "turbo" }', "page_service_pipelining"),
        ('page_service_pipelining={ mode = "pipelined", max_batch_size = 4, execution = "threads" }', "page_service_pipelining"),
        ('remote_storage={ local_path = "/nonexistent/remote", check_period = "0 s" }', "check_period must be above 0"),
    ],
)
def test_bad_override_fails_startup_naming_the_key(unstarted, raw, key):
    rc, out = unstarted.run_expect_failure(raw_overrides=[raw])
    assert rc != 0, f"pageserver accepted -c {raw}"
    assert key in out, f"start-up error for -c {raw} does not name {key}:\n{out}"


def test_max_batch_size_above_max_get_vectored_keys(unstarted):
    rc, out = unstarted.run_expect_failure(
        extra_overrides={
            "max_get_vectored_keys": 8,
            "page_service_pipelining": {"mode": "pipelined", "max_batch_size": 16, "execution": "tasks"},
        }
    )
    assert rc != 0
    assert "max_batch_size" in out or "max_get_vectored_keys" in out, out


def test_override_syntax_error(unstarted):
    rc, out = unstarted.run_expect_failure(raw_overrides=["listen_pg_addr="])
    assert rc != 0
    assert "listen_pg_addr" in out, out


def test_unknown_key_in_config_file(unstarted):
    unstarted.write_config('wait_lsn_timeout = "10 s"\nthis_key_is_wrong = 3\n')
    rc, out = unstarted.run_expect_failure()
    assert rc != 0
    assert "this_key_is_wrong" in out, out


def test_bad_toml_in_config_file(unstarted):
    unstarted.write_config("wait_lsn_timeout = \n")
    rc, out = unstarted.run_expect_failure()
    assert rc != 0
    assert "wait_lsn_timeout" in out or "TOML" in out or "toml" in out, out


def test_documented_config_file_starts(pageserver_factory):
    """config/pageserver.toml (every key with its default) is a valid config."""
    ps = pageserver_factory.create()
    ps.write_config((REPO_ROOT / "config" / "pageserver.toml").read_text())
    ps.start()  # ports come from -c, which must win over the file
    assert ps.http_client().status()
    ps.stop()


def test_pipelining_modes_start(pageserver_factory):
    for mode in [
        {"mode": "serial"},
        {"mode": "pipelined", "max_batch_size": 1, "execution": "tasks"},
        {"mode": "pipelined", "max_batch_size": 32, "execution": "concurrent-futures", "batching": "uniform-lsn"},
    ]:
        ps = pageserver_factory.create(name=f"ps_{len(pageserver_factory.instances)}", overrides={"page_service_pipelining": mode})
        ps.start()
        m = ps.http_client().metrics()
        expected = 0 if mode["mode"] == "serial" else mode["max_batch_size"]  # 0 = serial
        assert m.value("pageserver_page_service_config_max_batch_size") == expected
        ps.stop()
