"""What a hostile client, a web page or another local user can do against a real server
in its default configuration, and the defaults that stop them: log lines a client cannot
forge, files other users cannot read or write, TLS without old versions or weak suites,
and requests a browser sends on a page's behalf refused."""

import http.client
import os
import re
import socket
import stat
import subprocess

import pytest

from harness import BIN, Server, raw_request, status_of


# ---- logs -----------------------------------------------------------------------------

def test_a_break_reason_cannot_forge_a_log_line(server):
    c = server.client()
    assert c.acquire("logs/a", owner="o").status == 200
    reason = 'x\n ts=2026-01-01T00:00:00.000Z level=error msg="forged" \\ "\r\x1b[2K'
    r = c.brk("logs/a", reason=reason)
    assert r.status == 200 and r.json["broken"] is True
    c.close()
    server.stop()
    lines = [line for line in server.lines if "forged" in line]
    assert len(lines) == 1, server.lines
    assert lines[0].startswith("ts=") and 'msg="break requested"' in lines[0]
    assert not any(line.startswith(" ts=") or 'level=error msg="forged"' in line
                   for line in server.lines)
    # The value is one quoted logfmt value, its quotes, backslashes and controls escaped.
    m = re.search(r' reason=("(?:[^"\\]|\\.)*") request_id=', lines[0])
    assert m, lines[0]
    assert m.group(1) == ('"x\\n ts=2026-01-01T00:00:00.000Z level=error msg=\\"forged\\" '
                          '\\\\ \\"\\r\\x1b[2K"')


# ---- requests a browser sends on a web page's behalf ------------------------------------

def held(server, resource, owner="holder"):
    c = server.client()
    r = c.acquire(resource, owner=owner, ttl_ms=60000)
    assert r.status == 200, r
    c.close()
    return r.json


def state(server, resource):
    c = server.client()
    r = c.get(resource)
    c.close()
    assert r.status == 200, r
    return r.json


def raw(server, head, body=b"", port=None):
    """A raw request with `head`'s header lines, to the server's loopback address."""
    data = head.replace(b"{port}", b"%d" % server.port)
    if body:
        data += b"Content-Length: %d\r\n" % len(body)
    data += b"Connection: close\r\n\r\n" + body
    return raw_request("127.0.0.1", port or server.port, data)


def test_a_body_needs_a_json_content_type(server):
    body = b'{"owner":"v"}'
    # The probe's request: curl -X POST -H 'Content-Type:' --data-binary ... : 415 now.
    r = raw(server, b"POST /v1/resources/ct/a/acquire HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n", body)
    assert status_of(r) == 415 and b"unsupported_media_type" in r, r
    for ctype in (b"text/plain", b"text/plain;charset=UTF-8", b"multipart/form-data; boundary=x",
                  b"application/x-www-form-urlencoded"):
        r = raw(server, b"POST /v1/resources/ct/a/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: " + ctype + b"\r\n", body)
        assert status_of(r) == 415, (ctype, r)
    assert state(server, "ct/a")["state"] == "free"
    # JSON, with parameters, is served.
    r = raw(server, b"POST /v1/resources/ct/a/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json; charset=utf-8\r\n", body)
    assert status_of(r) == 200, r
    # A POST with no body at all is the empty object, with or without a Content-Length.
    r = raw(server, b"POST /v1/resources/ct/a/break HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Length: 0\r\n")
    assert status_of(r) == 200 and b'"broken":true' in r, r


def test_a_request_with_an_origin_is_refused(server):
    lease = held(server, "web/held")
    origin = b"Origin: https://evil.example\r\n"
    # The probe's request: a bodiless break with an Origin header.
    r = raw(server, b"POST /v1/resources/web/held/break HTTP/1.1\r\nHost: 127.0.0.1\r\n" + origin)
    assert status_of(r) == 403 and b'"forbidden"' in r and b"Origin" in r, r
    r = raw(server, b"POST /v1/resources/web/free/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\n" + origin
            + b"Content-Type: application/json\r\n", b'{"owner":"evil"}')
    assert status_of(r) == 403, r
    r = raw(server, b"GET /v1/resources/web/held HTTP/1.1\r\nHost: 127.0.0.1\r\n" + origin)
    assert status_of(r) == 403, r
    r = raw(server, b"GET /v1/resources/web/held HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: null\r\n")
    assert status_of(r) == 403, r
    after = state(server, "web/held")
    assert after["state"] == "held" and after["holder"]["fencing_token"] == lease["fencing_token"]
    assert state(server, "web/free")["state"] == "free"


def test_allowed_origins_are_served_exactly():
    with Server(args=["--allowed-origins", "https://dash.example, http://127.0.0.1:8000"]) as s:
        def acquire(origin, name):
            return status_of(raw(s, b"POST /v1/resources/o/%s/acquire HTTP/1.1\r\n" % name +
                                 b"Host: 127.0.0.1\r\nOrigin: " + origin + b"\r\n"
                                 b"Content-Type: application/json\r\n", b'{"owner":"d"}'))
        assert acquire(b"https://dash.example", b"a") == 200
        assert acquire(b"http://127.0.0.1:8000", b"b") == 200
        for other in (b"http://dash.example", b"https://dash.example:8443",
                      b"https://dash.example.evil.example", b"https://evil.example",
                      b"http://127.0.0.1:8001", b"null"):
            assert acquire(other, b"c") == 403, other
        assert state(s, "o/c")["state"] == "free"


@pytest.mark.parametrize("host", [b"evil.example", b"evil.example:{port}", b"127.0.0.1.nip.io",
                                  b"localhost.evil.example", b"[::2]", b"0.0.0.0", b"10.0.0.1",
                                  b"127.0.0.1:x", b"127.0.0.1:{port}:1", b""])
def test_a_loopback_server_refuses_other_host_names(server, host):
    """DNS rebinding: a page on a name its owner points at 127.0.0.1 sends its own name."""
    r = raw(server, b"POST /v1/resources/dns/acquire HTTP/1.1\r\nHost: " + host + b"\r\n"
            b"Content-Type: application/json\r\n", b'{"owner":"evil"}')
    assert status_of(r) in (400, 403), r
    if status_of(r) == 403:
        assert b"Host" in r
    assert state(server, "dns")["state"] == "free"


@pytest.mark.parametrize("host", [b"127.0.0.1:{port}", b"127.0.0.1", b"127.1.2.3:{port}",
                                  b"localhost:{port}", b"LOCALHOST", b"[::1]:{port}", b"[::1]"])
def test_a_loopback_server_serves_loopback_names(server, host):
    r = raw(server, b"GET /v1/resources/dns HTTP/1.1\r\nHost: " + host + b"\r\n")
    assert status_of(r) == 200, r


def test_allowed_hosts():
    with Server(args=["--allowed-hosts", "mutexd,Lock.Internal"]) as s:
        for host, want in ((b"mutexd:8080", 200), (b"lock.internal", 200), (b"localhost", 200),
                           (b"127.0.0.1:{port}", 200), (b"evil.example", 403),
                           (b"mutexd.evil.example", 403)):
            r = raw(s, b"GET /v1/resources/h HTTP/1.1\r\nHost: " + host + b"\r\n")
            assert status_of(r) == want, (host, r)
    with Server(args=["--allowed-hosts", "*"]) as s:
        r = raw(s, b"GET /v1/resources/h HTTP/1.1\r\nHost: anything.example\r\n")
        assert status_of(r) == 200, r


def test_a_wildcard_listener_does_not_check_the_host():
    """In a container the server listens on 0.0.0.0 and is reached by names it cannot
    know (docker compose's workers use mutexd:8080); an Origin is still refused."""
    with Server(listen="0.0.0.0:0") as s:
        r = raw(s, b"POST /v1/resources/c/acquire HTTP/1.1\r\nHost: mutexd:8080\r\n"
                b"Content-Type: application/json\r\n", b'{"owner":"worker"}')
        assert status_of(r) == 200, r
        r = raw(s, b"POST /v1/resources/c/break HTTP/1.1\r\nHost: mutexd:8080\r\n"
                b"Origin: https://evil.example\r\n")
        assert status_of(r) == 403, r
    with Server(listen="0.0.0.0:0", args=["--allowed-hosts", "mutexd"]) as s:
        for host, want in ((b"mutexd:8080", 200), (b"other:8080", 403), (b"127.0.0.1", 200)):
            r = raw(s, b"GET /v1/resources/c HTTP/1.1\r\nHost: " + host + b"\r\n")
            assert status_of(r) == want, (host, r)


@pytest.mark.parametrize("args", [["--allowed-origins", "evil.example"],
                                  ["--allowed-origins", "https://a.example/"],
                                  ["--allowed-origins", "ftp://a.example"],
                                  ["--allowed-origins", "https://a.example:99999x"],
                                  ["--allowed-origins", "https://a.example,"],
                                  ["--allowed-hosts", "a.example:80"],
                                  ["--allowed-hosts", "a b"],
                                  ["--allowed-hosts", "http://a.example"]])
def test_bad_allow_lists_stop_the_server(tmp_path, args):
    out = subprocess.run([BIN, "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d")] + args,
                         capture_output=True, text=True, timeout=10)
    assert out.returncode == 2 and args[0] in out.stderr, out.stderr


# A page on another origin, as any web site the user opens: it drives the API of the
# server on 127.0.0.1 with the requests a browser sends without asking the server first
# (no preflight): a body with no Content-Type, a text/plain body, a POST with no body.
# Synchronous XMLHttpRequest, so that every request is over when the page has loaded and
# --dump-dom prints what the script wrote. CORS hides the answers from the page; the
# requests still reach the server, which is what the attack needs.
PAGE = """<!doctype html><html><body><script>
var base = 'http://127.0.0.1:%(port)d/v1/resources/', out = [];
function post(path, body) {
  var x = new XMLHttpRequest();
  try { x.open('POST', base + path, false); x.send(body); return path + ' ' + x.status; }
  catch (e) { return path + ' sent'; }
}
out.push(post('web/free/acquire', new Blob(['{"owner":"evil"}'])));
out.push(post('web/text/acquire', '{"owner":"evil"}'));
out.push(post('web/held/break', null));
document.body.textContent = 'RESULT ' + out.join('; ');
</script></body></html>"""


class _PageServer:
    """A second local HTTP server, on another port: another origin. Serves `page`."""

    def __init__(self):
        import http.server
        import threading

        self.page = ""
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                data = outer.page.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.origin = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def open_in_browser(url, tmp_path):
    """Loads `url` in headless Chromium with a fresh profile; returns the page's DOM."""
    profile = tmp_path / ("profile-%d" % len(list(tmp_path.iterdir())))
    out = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                          "--no-first-run", "--disable-background-networking",
                          "--disable-component-update", "--disable-sync",
                          "--user-data-dir=%s" % profile, "--dump-dom", url],
                         capture_output=True, text=True, timeout=90)
    m = re.search(r"RESULT [^<]*", out.stdout)
    assert m, "the page did not run:\n%s\n%s" % (out.stdout[-2000:], out.stderr[-2000:])
    return m.group(0)


@pytest.fixture
def page():
    p = _PageServer()
    yield p
    p.close()


def test_a_web_page_cannot_drive_a_local_server(tmp_path, page):
    with Server() as s:
        lease = held(s, "web/held")
        page.page = PAGE % {"port": s.port}
        result = open_in_browser(page.origin + "/", tmp_path)
        # Nothing changed: the free resources are free, the held one is held by its holder.
        assert state(s, "web/free")["state"] == "free", result
        assert state(s, "web/text")["state"] == "free", result
        after = state(s, "web/held")
        assert after["state"] == "held", result
        assert after["holder"]["fencing_token"] == lease["fencing_token"], result


def test_the_page_reaches_a_server_that_allows_its_origin(tmp_path, page):
    """The control for the test above: the page's requests do reach the server. With the
    page's origin allowed, its bodiless break goes through; its bodies without a JSON
    type are still refused."""
    with Server(args=["--allowed-origins", page.origin]) as s:
        held(s, "web/held")
        page.page = PAGE % {"port": s.port}
        result = open_in_browser(page.origin + "/", tmp_path)
        assert state(s, "web/held")["state"] == "free", result
        assert state(s, "web/free")["state"] == "free", result
        assert state(s, "web/text")["state"] == "free", result


# ---- TLS ------------------------------------------------------------------------------

def handshake(server, *args):
    """openssl s_client against the server: the protocol and suite agreed, or None. The
    client's own floor is lowered (@SECLEVEL=0), so only the server can refuse."""
    out = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % server.port,
                          "-servername", "localhost"] + list(args),
                         input="", capture_output=True, text=True, timeout=20)
    m = re.search(r"^New, (\S+), Cipher is (\S+)", out.stdout, re.M)
    if not m or m.group(2) == "(NONE)":
        return None
    proto = re.search(r"^\s*Protocol\s*:\s*(\S+)", out.stdout, re.M)
    return proto.group(1) if proto else m.group(1), m.group(2)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    from test_security import make_cert
    return make_cert(str(tmp_path_factory.mktemp("tls")))


def test_tls_12_and_13_with_aead_suites_only(certs):
    ca, cert, key = certs
    with Server(args=["--tls-cert", cert, "--tls-key", key]) as s:
        low = "DEFAULT@SECLEVEL=0"
        assert handshake(s, "-tls1", "-cipher", low) is None
        assert handshake(s, "-tls1_1", "-cipher", low) is None
        for suite in ("AES128-SHA", "ECDHE-RSA-AES128-SHA", "AES256-SHA", "ECDHE-RSA-AES256-SHA",
                      "AES128-SHA256", "ECDHE-RSA-AES128-SHA256", "AES128-GCM-SHA256"):
            assert handshake(s, "-tls1_2", "-cipher", suite + "@SECLEVEL=0") is None, suite
        for suite in ("ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES256-GCM-SHA384",
                      "ECDHE-RSA-CHACHA20-POLY1305"):
            assert handshake(s, "-tls1_2", "-cipher", suite) == ("TLSv1.2", suite)
        got = handshake(s, "-tls1_2")
        assert got and got[0] == "TLSv1.2" and ("GCM" in got[1] or "POLY1305" in got[1]), got
        got = handshake(s, "-tls1_3")
        assert got and got[0] == "TLSv1.3", got


def test_tls_priorities_option(certs, tmp_path):
    ca, cert, key = certs
    # An operator may choose otherwise: here TLS 1.3 alone.
    with Server(args=["--tls-cert", cert, "--tls-key", key,
                      "--tls-priorities", "NORMAL:-VERS-ALL:+VERS-TLS1.3"]) as s:
        assert handshake(s, "-tls1_2") is None
        assert handshake(s, "-tls1_3")[0] == "TLSv1.3"
    out = subprocess.run([BIN, "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d"),
                          "--tls-cert", cert, "--tls-key", key, "--tls-priorities", "NOPE:+X"],
                         capture_output=True, text=True, timeout=10)
    assert out.returncode == 1 and "--tls-priorities" in out.stderr, out.stderr


# ---- files other local users must not read or write --------------------------------

def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.mark.parametrize("umask", [0o022, 0o000])
def test_the_store_is_private_whatever_the_umask(tmp_path, umask):
    """The store holds every lease id, the credential of its lease."""
    data = str(tmp_path / "data")
    old = os.umask(umask)
    try:
        s = Server(data_dir=data).start()
    finally:
        os.umask(old)
    c = s.client()
    assert c.acquire("private", owner="o").status == 200
    c.close()
    assert mode(data) == 0o700
    names = os.listdir(data)
    assert "mutexd.db" in names and "mutexd.db-wal" in names, names
    for name in names:
        assert mode(os.path.join(data, name)) & 0o077 == 0, (name, oct(mode(os.path.join(data, name))))
    s.stop()


@pytest.mark.parametrize("perm", [0o777, 0o770, 0o702, 0o1777])
def test_a_data_dir_others_can_write_is_refused(tmp_path, perm):
    data = tmp_path / "data"
    data.mkdir()
    os.chmod(data, perm)
    out = subprocess.run([BIN, "--listen", "127.0.0.1:0", "--data-dir", str(data)],
                         capture_output=True, text=True, timeout=10)
    assert out.returncode == 1 and "writable by other users" in out.stderr, out.stderr
    assert os.listdir(data) == []


def test_a_data_dir_others_can_read_is_warned_and_old_files_made_private(tmp_path):
    data = str(tmp_path / "data")
    with Server(data_dir=data) as s:
        c = s.client()
        assert c.acquire("old", owner="o", ttl_ms=60000).status == 200
        c.close()
    # As an earlier version left them.
    os.chmod(data, 0o755)
    for name in os.listdir(data):
        os.chmod(os.path.join(data, name), 0o644)
    with Server(data_dir=data) as s:
        assert any("level=warn" in line and "open to other users" in line for line in s.lines)
        for name in os.listdir(data):
            assert mode(os.path.join(data, name)) & 0o077 == 0, name
        assert s.client().get("old").json["state"] == "held"


def write_tokens(path, lines, perm=0o600):
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.chmod(path, perm)


def token_line(name, secret, scopes):
    import hashlib
    return "%s sha256:%s %s" % (name, hashlib.sha256(secret.encode()).hexdigest(), scopes)


@pytest.mark.parametrize("perm", [0o666, 0o646, 0o664, 0o620])
def test_a_tokens_file_others_can_write_stops_the_server(tmp_path, perm):
    path = str(tmp_path / "tokens")
    write_tokens(path, [token_line("ops", "s" * 40, "read,write,admin")], perm)
    out = subprocess.run([BIN, "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d"),
                          "--auth-tokens", path], capture_output=True, text=True, timeout=10)
    assert out.returncode == 1 and "writable by other users" in out.stderr, out.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the file to another user")
def test_a_tokens_file_of_another_user_stops_the_server(tmp_path):
    path = str(tmp_path / "tokens")
    write_tokens(path, [token_line("ops", "s" * 40, "read")], 0o644)
    os.chown(path, 65534, 65534)
    out = subprocess.run([BIN, "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d"),
                          "--auth-tokens", path], capture_output=True, text=True, timeout=10)
    assert out.returncode == 1 and "another user" in out.stderr, out.stderr


def test_a_tokens_file_in_a_directory_others_can_write_stops_the_server(tmp_path):
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, 0o777)
    path = str(d / "tokens")
    write_tokens(path, [token_line("ops", "s" * 40, "read")], 0o644)
    out = subprocess.run([BIN, "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d"),
                          "--auth-tokens", path], capture_output=True, text=True, timeout=10)
    assert out.returncode == 1 and "other users can write" in out.stderr, out.stderr


def test_sighup_keeps_the_old_tokens_when_others_can_write_the_file(tmp_path):
    """The probe's attack: a local user appends an admin token to a world-writable file
    and waits for the next SIGHUP to break another team's lease."""
    import signal
    import time
    path = str(tmp_path / "tokens")
    team, intruder = "t" * 40, "i" * 40
    write_tokens(path, [token_line("team", team, "read,write")], 0o644)
    with Server(args=["--auth-tokens", path]) as s:
        c = s.client()
        auth = lambda secret: {"Authorization": "Bearer " + secret}  # noqa: E731
        r = c.post("team/job", "acquire", {"owner": "team"}, headers=auth(team))
        assert r.status == 200, r
        os.chmod(path, 0o666)
        with open(path, "a") as f:
            f.write(token_line("intruder", intruder, "read,write,admin") + "\n")
        s.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not any("tokens file is refused" in line
                                                      for line in s.lines):
            time.sleep(0.05)
        refused = [line for line in s.lines if "tokens file is refused" in line]
        assert refused and "writable by other users" in refused[0], s.lines
        r = c.post("team/job", "break", {"reason": "mine now"}, headers=auth(intruder))
        assert r.status == 401, r
        r = c.request("GET", "/v1/resources/team/job", headers=auth(team))
        assert r.status == 200 and r.json["state"] == "held", r
        # Put right, the file is taken again at the next SIGHUP.
        os.chmod(path, 0o600)
        s.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if c.request("GET", "/v1/resources/team/job", headers=auth(intruder)).status == 200:
                break
            time.sleep(0.05)
        assert c.request("GET", "/v1/resources/team/job", headers=auth(intruder)).status == 200
        c.close()
