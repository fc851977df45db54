"""Server options: every bad option is refused with a clear message and exit status 2,
before the data directory is created, and nothing listens."""

import os
import re
import subprocess

import pytest

from harness import BIN, Server


def refuse(tmp_path, args, env=None, timeout=10):
    """Runs mutexd with args and a data directory that does not exist yet; returns its
    stderr after checking that it refused to start and left no data directory behind.
    A server that starts instead (the bad option accepted) is killed at the timeout."""
    data = tmp_path / "data"
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.Popen([BIN, "--data-dir", str(data)] + args, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=e)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        pytest.fail("mutexd %s started instead of refusing:\n%s" % (args, err))
    assert p.returncode == 2, (args, p.returncode, err)
    assert err.startswith("mutexd: "), err
    assert not data.exists(), "a refused option left %s behind" % data
    return err


@pytest.mark.parametrize("listen", ["127.0.0.1:99999", "0.0.0.0:70000", "127.0.0.1:65536",
                                    "[::1]:65536", "127.0.0.1:-1", "127.0.0.1:+80",
                                    "127.0.0.1:80x", "127.0.0.1: 80", "127.0.0.1:"])
def test_listen_port_out_of_range_is_refused(tmp_path, listen):
    err = refuse(tmp_path, ["--listen", listen])
    assert "port must be a number from 0 to 65535" in err, err


@pytest.mark.parametrize("listen", ["8090", ":8090", "127.0.0.1"])
def test_listen_without_host_and_port_is_refused(tmp_path, listen):
    err = refuse(tmp_path, ["--listen", listen])
    assert "--listen must be HOST:PORT" in err, err


def test_listen_from_the_environment_is_checked_too(tmp_path):
    err = refuse(tmp_path, [], env={"MUTEXD_LISTEN": "127.0.0.1:99999"})
    assert err.startswith("mutexd: MUTEXD_LISTEN: "), err


def test_listen_host_that_does_not_resolve_is_refused(tmp_path):
    err = refuse(tmp_path, ["--listen", "no-such-host.invalid:8090"])
    assert "cannot resolve 'no-such-host.invalid'" in err, err


def test_listen_port_zero_takes_a_free_port_and_logs_it():
    with Server(listen="127.0.0.1:0") as s:
        assert 0 < s.port <= 65535
        assert s.client().request("GET", "/healthz").status == 200


def flags_with_values():
    out = subprocess.run([BIN, "--help"], capture_output=True, text=True, check=True).stdout
    return re.findall(r"^  --([a-z-]+) [A-Z:]+ ", out, re.M)


def test_every_option_without_its_value_says_so(tmp_path):
    flags = flags_with_values()
    assert "listen" in flags and "data-dir" in flags and len(flags) >= 20, flags
    for flag in flags:
        # --data-dir last would give --data-dir its value: put the flag at the end alone.
        p = subprocess.run([BIN, "--" + flag], capture_output=True, text=True, timeout=10)
        assert p.returncode == 2, (flag, p.stderr)
        assert p.stderr.startswith("mutexd: --%s needs a value" % flag), p.stderr


def test_flags_without_values_refuse_one(tmp_path):
    err = refuse(tmp_path, ["--help=yes"])
    assert "--help=yes takes no value" in err, err
    err = refuse(tmp_path, ["--bogus"])
    assert "unknown option: --bogus" in err, err


def test_dash_h_is_help_and_other_short_flags_are_named(tmp_path):
    long = subprocess.run([BIN, "--help"], capture_output=True, text=True, timeout=10)
    short = subprocess.run([BIN, "-h"], capture_output=True, text=True, timeout=10)
    assert (short.returncode, short.stdout, short.stderr) == (0, long.stdout, ""), short
    for flag in ("-hh", "-hx", "-V", "-x"):
        err = refuse(tmp_path, [flag])
        assert err.splitlines()[0] == "mutexd: unknown option: %s" % flag, (flag, err)


def test_missing_tls_files_are_refused_before_the_disk(tmp_path):
    err = refuse(tmp_path, ["--listen", "127.0.0.1:0", "--tls-cert", str(tmp_path / "no.pem"),
                            "--tls-key", str(tmp_path / "no.key")])
    assert "--tls-cert: cannot read" in err and "No such file" in err, err


def test_tls_files_that_are_not_pem_are_refused_before_the_disk(tmp_path):
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    err = refuse(tmp_path, ["--listen", "127.0.0.1:0", "--tls-cert", str(junk),
                            "--tls-key", str(junk)])
    assert "--tls-cert: no PEM certificate" in err, err


def test_a_directory_is_not_a_tokens_file(tmp_path):
    err = refuse(tmp_path, ["--listen", "127.0.0.1:0", "--auth-tokens", str(tmp_path)])
    assert "--auth-tokens: cannot read" in err, err


def test_missing_tokens_file_is_refused_before_the_disk(tmp_path):
    err = refuse(tmp_path, ["--listen", "127.0.0.1:0", "--auth-tokens",
                            str(tmp_path / "no-tokens")])
    assert "--auth-tokens: cannot read" in err, err


def test_a_tokens_file_that_does_not_parse_leaves_no_data_directory(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("x sha256:zz read\n")
    data = tmp_path / "data"
    p = subprocess.run([BIN, "--listen", "127.0.0.1:0", "--data-dir", str(data),
                        "--auth-tokens", str(tokens)], capture_output=True, text=True,
                       timeout=10)
    assert p.returncode == 1 and "line 1" in p.stderr, p.stderr
    assert not data.exists()


@pytest.mark.parametrize("args", [["--blob-connection-string", "AccountName"],
                                  ["--blob-connection-string", "UseDevelopmentStorage=true",
                                   "--blob-container", "Bad_Name"]])
def test_blob_options_are_checked_before_the_disk(tmp_path, args):
    # The mirror would otherwise be opened (and the name refused) after the store.
    err = refuse(tmp_path, ["--listen", "127.0.0.1:0", "--mirror-takeover-ms", "1000"] + args)
    assert "--blob-" in err, err


@pytest.mark.parametrize("args,missing", [
    (["--ha"], ["--blob-connection-string", "--mirror sync", "--advertise-url"]),
    (["--ha", "--blob-connection-string", "UseDevelopmentStorage=true", "--mirror", "async",
      "--advertise-url", "http://127.0.0.1:8081"], ["--mirror sync"]),
    (["--ha", "--blob-connection-string", "UseDevelopmentStorage=true", "--mirror", "sync"],
     ["--advertise-url"]),
])
def test_ha_without_what_it_needs_names_what_is_missing(tmp_path, args, missing):
    err = refuse(tmp_path, ["--listen", "127.0.0.1:0"] + args)
    assert err.startswith("mutexd: --ha needs"), err
    for m in missing:
        assert m in err, (m, err)
    for m in {"--blob-connection-string", "--mirror sync", "--advertise-url"} - set(missing):
        assert m not in err, (m, err)


def test_ha_from_the_environment_is_1_or_0(tmp_path):
    err = refuse(tmp_path, ["--listen", "127.0.0.1:0"], env={"MUTEXD_HA": "yes"})
    assert "MUTEXD_HA must be 1 or 0" in err, err
    err = refuse(tmp_path, ["--listen", "127.0.0.1:0"], env={"MUTEXD_HA": "1"})
    assert "--ha needs" in err, err
    err = refuse(tmp_path, ["--ha=1"])
    assert "--ha=1 takes no value" in err, err


@pytest.mark.parametrize("url", ["127.0.0.1:8081", "http://127.0.0.1", "ftp://a:21",
                                 "http://a:0", "http://a:80/v1"])
def test_advertise_url_must_be_http_with_a_host_and_a_port(tmp_path, url):
    err = refuse(tmp_path, ["--listen", "127.0.0.1:0", "--advertise-url", url])
    assert "--advertise-url must be http://HOST:PORT" in err, err


@pytest.mark.parametrize("flag,low,high", [("failover-after-ms", 499, 600001),
                                           ("failover-grace-ms", None, 3600001),
                                           ("forward-timeout-ms", 99, 600001)])
def test_group_durations_are_bounded(tmp_path, flag, low, high):
    for v in [low, high]:
        if v is not None:
            err = refuse(tmp_path, ["--listen", "127.0.0.1:0", "--" + flag, str(v)])
            assert "--%s must be a whole number" % flag in err, err


def test_help_lists_the_group_options():
    out = subprocess.run([BIN, "--help"], capture_output=True, text=True, check=True).stdout
    for flag, env in [("--ha ", "MUTEXD_HA=1"), ("--advertise-url URL", "MUTEXD_ADVERTISE_URL"),
                      ("--failover-after-ms MS", "MUTEXD_FAILOVER_AFTER_MS, default 3000"),
                      ("--failover-grace-ms MS", "MUTEXD_FAILOVER_GRACE_MS, default 15000"),
                      ("--forward-timeout-ms MS", "MUTEXD_FORWARD_TIMEOUT_MS, default 10000")]:
        assert flag in out and env in out, (flag, env)


def test_one_http_thread_starts_without_a_warning():
    # One HTTP thread is the default on 2 cores (one fewer than the cores): libmicrohttpd
    # warned of a pool of 1 at every start.
    with Server(args=["--threads", "1"]) as s:
        assert s.client().request("GET", "/healthz").status == 200
        lines = s.log().splitlines()
    assert any("threads=1" in line for line in lines), lines
    assert not [line for line in lines if "thread pool" in line or "arning" in line], lines
