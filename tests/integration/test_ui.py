"""The dashboard at /ui/ (docs/dashboard.md), against a real server: its files come from
the binary with their types, ETags and security headers; nothing in them reaches for
another origin; --ui off hides it; and the page may call its own server (an Origin equal
to the request's Host) while a foreign Origin is still refused."""

import os
import re

from harness import ROOT, Server
from test_security import bearer, tokens_file, TOKENS

UI_DIR = os.path.join(ROOT, "ui")
TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
}
SECURITY = ("content-security-policy", "x-frame-options", "x-content-type-options",
            "referrer-policy")


def ui_files():
    out = []
    for base, dirs, files in os.walk(UI_DIR):
        for f in files:
            if not f.startswith("."):
                out.append(os.path.relpath(os.path.join(base, f), UI_DIR))
    return sorted(out)


def assert_secured(r):
    csp = r.header("content-security-policy")
    assert csp and csp.startswith("default-src 'self';"), r.headers
    for d in ("script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'",
              "base-uri 'none'", "form-action 'self'"):
        assert d in csp, (d, csp)
    assert "unsafe" not in csp and "nonce" not in csp
    assert r.header("x-frame-options") == "DENY"
    assert r.header("x-content-type-options") == "nosniff"
    assert r.header("referrer-policy") == "no-referrer"


def test_ui_serves_the_page_with_every_security_header(server):
    c = server.client()
    r = c.request("GET", "/ui/")
    assert r.status == 200
    assert r.header("content-type") == "text/html; charset=utf-8"
    assert r.header("cache-control") == "no-cache"
    assert r.body.lstrip().lower().startswith("<!doctype html>")
    assert_secured(r)
    # The page itself names what the browser tests find it by.
    for hook in ('id="token-prompt"', 'id="break-dialog"', 'id="banner"', 'id="resource-rows"',
                 'id="filter"', 'id="detail"', 'id="servers"', 'id="figures"'):
        assert hook in r.body, hook
    # /ui goes to /ui/, where the page's relative links resolve.
    r = c.request("GET", "/ui")
    assert r.status == 301 and r.header("location") == "/ui/"
    assert_secured(r)
    c.close()


def test_every_file_is_served_with_its_type_etag_and_304(server):
    c = server.client()
    files = ui_files()
    assert "index.html" in files and "app.js" in files
    etags = set()
    for f in files:
        path = "/ui/" + f
        r = c.request("GET", path)
        assert r.status == 200, (path, r)
        assert r.header("content-type") == TYPES[os.path.splitext(f)[1]], (path, r.headers)
        with open(os.path.join(UI_DIR, f), encoding="utf-8") as fh:
            assert r.body == fh.read(), path  # the bytes of the file, from the binary
        tag = r.header("etag")
        assert re.fullmatch(r'"[0-9a-f]{32}"', tag), tag  # strong: no W/
        etags.add(tag)
        assert r.header("cache-control") == "no-cache"
        assert_secured(r)
        r = c.request("GET", path, headers={"If-None-Match": tag})
        assert r.status == 304 and r.body == "", (path, r)
        assert r.header("etag") == tag
        assert_secured(r)
        r = c.request("GET", path, headers={"If-None-Match": '"0000", W/' + tag})
        assert r.status == 304
        r = c.request("GET", path, headers={"If-None-Match": '"0000"'})
        assert r.status == 200
        r = c.request("HEAD", path)
        assert r.status == 200 and r.body == "" and r.header("etag") == tag
    assert len(etags) == len(files)
    c.close()


def test_errors_under_ui_carry_the_headers_too(server):
    c = server.client()
    for method, path, status in (("GET", "/ui/no-such.js", 404), ("GET", "/ui/../v1/resources", 404),
                                 ("POST", "/ui/", 405), ("GET", "/ui/app.js/", 404)):
        r = c.request(method, path, body={} if method == "POST" else None)
        assert r.status == status, (path, r)
        assert_secured(r)
    r = c.request("GET", "/uix")
    assert r.status == 404 and r.header("content-security-policy") is None
    c.close()


# An http:// or https:// URL, or a protocol-relative //host in a link, a src, an import or
# a CSS url(): the page must load and call nothing but its own server. The SVG namespace
# is a name, never fetched.
EXTERNAL = re.compile(r"""(https?:)?//[A-Za-z0-9.-]+\.[A-Za-z]{2,}|https?://""")
ALLOWED = ("http://www.w3.org/2000/svg",)


def test_no_file_references_another_origin():
    for f in ui_files():
        with open(os.path.join(UI_DIR, f), encoding="utf-8") as fh:
            text = fh.read()
        for a in ALLOWED:
            text = text.replace(a, "")
        # Comments in JS and CSS may say "//" freely: only code and markup are scanned.
        if f.endswith(".js"):
            text = re.sub(r"^\s*//.*$", "", text, flags=re.M)
        hits = EXTERNAL.findall(text)
        m = EXTERNAL.search(text)
        assert not m, (f, text[max(0, m.start() - 40):m.end() + 40] if m else hits)
        if f.endswith(".html"):
            # No inline script, handler or style (the CSP would refuse them anyway).
            assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", text), f
            assert not re.search(r"\son[a-z]+\s*=", text), f
            assert not re.search(r"\sstyle\s*=", text), f
            assert "<style" not in text, f


def test_ui_off_is_404():
    with Server(args=["--ui", "off"]) as s:
        c = s.client()
        for path in ("/ui/", "/ui/app.js", "/ui"):
            r = c.request("GET", path)
            assert r.status == 404 and r.code == "not_found", (path, r)
            assert_secured(r)
        assert c.request("GET", "/healthz").status == 200
        c.close()
    with Server(env={"MUTEXD_UI": "off"}) as s:
        c = s.client()
        assert c.request("GET", "/ui/").status == 404
        c.close()


def test_own_origin_is_served_and_a_foreign_one_refused(server):
    c = server.client()
    own = "http://127.0.0.1:%d" % server.port
    r = c.post("ui/origin", "acquire", {"owner": "page"}, headers={"Origin": own})
    assert r.status == 200, r
    r = c.request("GET", "/v1/resources/ui/origin", headers={"Origin": own})
    assert r.status == 200 and r.json["state"] == "held"
    r = c.post("ui/origin", "break", {"reason": "from the dashboard"}, headers={"Origin": own})
    assert r.status == 200 and r.json["broken"] is True
    for foreign in ("http://127.0.0.1:%d" % (server.port + 1), "https://127.0.0.1:%d" % server.port,
                    "http://localhost:%d" % server.port, "null", "http://evil.example"):
        r = c.post("ui/origin", "acquire", {"owner": "page"}, headers={"Origin": foreign})
        assert r.status == 403 and r.code == "forbidden", (foreign, r)
    # The page's files are public: an Origin (a module script's) does not matter there, but
    # the Host check against DNS rebinding still does.
    r = c.request("GET", "/ui/app.js", headers={"Origin": "http://evil.example"})
    assert r.status == 200
    r = c.request("GET", "/ui/app.js", headers={"Host": "rebind.example:%d" % server.port})
    assert r.status == 403
    assert_secured(r)
    # The other defences stay: a form's text/plain POST from the page itself is still 415.
    r = c.request("POST", "/v1/resources/ui/origin/acquire", body='{"owner":"x"}',
                  headers={"Origin": own, "Content-Type": "text/plain"})
    assert r.status == 415
    c.close()


def test_files_need_no_token_but_the_api_still_does(tmp_path):
    path = str(tmp_path / "tokens")
    tokens_file(path, TOKENS)
    with Server(args=["--auth-tokens", path]) as s:
        c = s.client()
        r = c.request("GET", "/ui/")
        assert r.status == 200
        assert_secured(r)
        assert c.request("GET", "/ui/app.js").status == 200
        assert c.request("GET", "/v1/resources").status == 401
        assert c.request("GET", "/v1/resources", headers=bearer("reader")).status == 200
        c.close()
