"""Authorization (bearer tokens, scopes, prefixes, reload on SIGHUP) and TLS, against a
real server."""

import hashlib
import http.client
import os
import signal
import ssl
import subprocess
import tempfile
import time

import pytest

from harness import BIN, Client, Server

TOKENS = {
    "reader": ("r-" + "a" * 40, "read", None),
    "deployer": ("w-" + "b" * 40, "read,write", "jobs/"),
    "operator": ("o-" + "c" * 40, "read,write,admin", None),
}


def tokens_file(path, tokens):
    with open(path, "w") as f:
        f.write("# name hash scopes [prefix]\n\n")
        for name, (secret, scopes, prefix) in tokens.items():
            digest = hashlib.sha256(secret.encode()).hexdigest()
            f.write("%s sha256:%s %s%s\n" % (name, digest, scopes, " " + prefix if prefix else ""))


def bearer(name, tokens=TOKENS):
    return {"Authorization": "Bearer " + tokens[name][0]}


@pytest.fixture
def secured(tmp_path):
    path = str(tmp_path / "tokens")
    tokens_file(path, TOKENS)
    s = Server(args=["--auth-tokens", path]).start()
    s.tokens_path = path
    yield s
    s.stop()


def test_no_or_bad_token_is_401(secured):
    c = secured.client()
    r = c.acquire("jobs/a", owner="o")
    assert r.status == 401 and r.code == "unauthorized"
    assert r.header("www-authenticate").startswith("Bearer")
    r = c.post("jobs/a", "acquire", {"owner": "o"}, headers={"Authorization": "Bearer nope"})
    assert r.status == 401
    r = c.post("jobs/a", "acquire", {"owner": "o"}, headers={"Authorization": "Basic Zm9vOmJhcg=="})
    assert r.status == 401
    assert c.request("GET", "/v1/resources/jobs/a").status == 401
    assert c.request("GET", "/metrics").status == 401
    c.close()


def test_scopes_and_prefixes(secured):
    c = secured.client()
    # write, within the prefix
    r = c.post("jobs/nightly", "acquire", {"owner": "d"}, headers=bearer("deployer"))
    assert r.status == 200, r
    lid = r.json["lease_id"]
    assert c.post("jobs/nightly", "renew", {"lease_id": lid}, headers=bearer("deployer")).status == 200
    # outside the prefix
    r = c.post("other/x", "acquire", {"owner": "d"}, headers=bearer("deployer"))
    assert r.status == 403 and r.code == "forbidden"
    assert c.request("GET", "/v1/resources/other/x", headers=bearer("deployer")).status == 403
    # read only
    r = c.post("jobs/x", "acquire", {"owner": "r"}, headers=bearer("reader"))
    assert r.status == 403 and r.code == "forbidden"
    assert c.request("GET", "/v1/resources/jobs/nightly", headers=bearer("reader")).status == 200
    # break needs admin
    assert c.post("jobs/nightly", "break", {}, headers=bearer("deployer")).status == 403
    r = c.post("jobs/nightly", "break", {"reason": "test"}, headers=bearer("operator"))
    assert r.status == 200 and r.json["broken"] is True
    # list: a prefix-limited token lists within its prefix only
    assert c.request("GET", "/v1/resources?prefix=jobs/", headers=bearer("deployer")).status == 200
    assert c.request("GET", "/v1/resources", headers=bearer("deployer")).status == 403
    assert c.request("GET", "/v1/resources", headers=bearer("reader")).status == 200
    # operations: health and readiness are open, metrics need read
    assert c.request("GET", "/healthz").status == 200
    assert c.request("GET", "/readyz").status == 200
    m = c.request("GET", "/metrics", headers=bearer("reader"))
    assert m.status == 200 and "mutexd_auth_failures_total" in m.body
    c.close()


def test_a_set_needs_write_and_every_name_within_the_prefix(secured):
    c = secured.client()
    body = {"resources": ["jobs/a", "jobs/b"], "owner": "d"}
    assert c.request("POST", "/v1/acquire", body).status == 401
    r = c.request("POST", "/v1/acquire", body, headers=bearer("reader"))
    assert r.status == 403 and r.code == "forbidden", r
    r = c.request("POST", "/v1/acquire", {"resources": ["jobs/a", "other/b"], "owner": "d"},
                  headers=bearer("deployer"))
    assert r.status == 403 and r.code == "forbidden" and "other/b" in r.body, r
    assert c.request("GET", "/v1/resources/jobs/a", headers=bearer("reader")).json["index"] == 0
    r = c.request("POST", "/v1/acquire", body, headers=bearer("deployer"))
    assert r.status == 200, r
    lid = r.json["leases"][0]["lease_id"]
    for path in ("/v1/renew", "/v1/release"):
        r = c.request("POST", path, {"resources": ["jobs/a", "other/b"], "lease_id": lid},
                      headers=bearer("deployer"))
        assert r.status == 403, r
        r = c.request("POST", path, {"resources": ["jobs/a", "jobs/b"], "lease_id": lid},
                      headers=bearer("deployer"))
        assert r.status == 200, r
    c.close()


def test_sighup_reloads_tokens_without_dropping_connections(secured):
    c = secured.client()
    assert c.request("GET", "/v1/resources/a", headers=bearer("reader")).status == 200
    conn_before = c.conn.sock
    newer = dict(TOKENS)
    del newer["reader"]
    newer["late"] = ("l-" + "d" * 40, "read", None)
    tokens_file(secured.tokens_path, newer)
    secured.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if c.request("GET", "/v1/resources/a", headers=bearer("late", newer)).status == 200:
            break
        time.sleep(0.05)
    assert c.request("GET", "/v1/resources/a", headers=bearer("late", newer)).status == 200
    assert c.request("GET", "/v1/resources/a", headers=bearer("reader")).status == 401
    assert c.conn.sock is conn_before  # the same keep-alive connection throughout
    # A file that does not parse leaves the tokens in force.
    open(secured.tokens_path, "w").write("late sha256:xyz read\n")
    secured.proc.send_signal(signal.SIGHUP)
    time.sleep(0.5)
    assert c.request("GET", "/v1/resources/a", headers=bearer("late", newer)).status == 200
    assert any("does not parse" in line for line in secured.lines)
    c.close()


@pytest.mark.parametrize("line", ["x sha256:zz read", "x md5:" + "0" * 32 + " read",
                                  "x sha256:" + "0" * 64 + " root", "x sha256:" + "0" * 64,
                                  "x sha256:" + "0" * 64 + " read a b"])
def test_a_bad_tokens_file_stops_the_server(tmp_path, line):
    path = tmp_path / "tokens"
    path.write_text(line + "\n")
    out = subprocess.run([BIN, "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d"),
                          "--auth-tokens", str(path)], capture_output=True, text=True, timeout=10)
    assert out.returncode == 1 and "line 1" in out.stderr


def make_cert(d):
    """A CA and a server certificate for 127.0.0.1, made with the openssl tool."""
    def run(*args):
        subprocess.run(["openssl"] + list(args), check=True, capture_output=True, cwd=d)
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", "2", "-subj", "/CN=mutexd test CA")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
        "-subj", "/CN=127.0.0.1")
    with open(os.path.join(d, "ext.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf")
    return [os.path.join(d, n) for n in ("ca.pem", "server.pem", "server.key")]


def test_tls():
    d = tempfile.mkdtemp(prefix="mutexd-tls-")
    ca, cert, key = make_cert(d)
    with Server(args=["--tls-cert", cert, "--tls-key", key]) as s:
        ctx = ssl.create_default_context(cafile=ca)
        conn = http.client.HTTPSConnection(s.host, s.port, context=ctx, timeout=10)
        conn.request("POST", "/v1/resources/tls/acquire", body=b'{"owner":"o"}',
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        assert r.status == 200 and b"fencing_token" in r.read()
        conn.close()
        # Without the CA the certificate is not trusted.
        conn = http.client.HTTPSConnection(s.host, s.port, context=ssl.create_default_context(),
                                           timeout=10)
        with pytest.raises(ssl.SSLError):
            conn.request("GET", "/healthz")
        conn.close()
        # Plain HTTP to the TLS port gets nothing useful.
        plain = Client(s.host, s.port, timeout=5, retry=False)
        with pytest.raises(Exception):
            r = plain.request("GET", "/healthz")
            assert r.status != 200
        plain.close()
        # The container health check works over TLS too.
        probe = subprocess.run([BIN, "--probe", "--listen", "%s:%d" % (s.host, s.port),
                                "--tls-cert", cert, "--tls-key", key], capture_output=True)
        assert probe.returncode == 0, probe.stderr
    subprocess.run(["rm", "-rf", d])


def test_probe_flag(server):
    ok = subprocess.run([BIN, "--probe", "--listen", "%s:%d" % (server.host, server.port)])
    assert ok.returncode == 0
    down = subprocess.run([BIN, "--probe", "--listen", "127.0.0.1:1"], capture_output=True)
    assert down.returncode == 1
