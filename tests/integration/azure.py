"""A real Azurite for the tests (scripts/azurite.sh: the npm package pinned in
tests/azurite), and a minimal Blob REST reader with SharedKey signing on the standard
library, so the tests can look at the container independently of the server's own code."""

import base64
import datetime
import hashlib
import hmac
import http.client
import os
import re
import shutil
import signal
import subprocess
import tempfile
import urllib.parse

from harness import ROOT

SCRIPT = os.path.join(ROOT, "scripts", "azurite.sh")


# Every Azurite started and not yet stopped: stop_leftovers() stops what a failed test left.
RUNNING = set()


def stop_leftovers():
    for a in list(RUNNING):
        a.stop()


class Azurite:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="mutexd-azurite-")
        subprocess.run([SCRIPT, "install"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([SCRIPT, "start", self.dir], check=True, stdout=subprocess.DEVNULL)
        self.port = int(open(os.path.join(self.dir, "port")).read())
        self.pid = int(open(os.path.join(self.dir, "pid")).read())
        RUNNING.add(self)
        self.connection_string = open(os.path.join(self.dir, "connection-string")).read().strip()
        parts = dict(p.split("=", 1) for p in self.connection_string.split(";") if p)
        self.account = parts["AccountName"]
        self.key = base64.b64decode(parts["AccountKey"])

    def stop(self):
        subprocess.run([SCRIPT, "stop", self.dir], check=False, stdout=subprocess.DEVNULL)
        RUNNING.discard(self)
        shutil.rmtree(self.dir, ignore_errors=True)

    def pause(self):
        """Freezes Azurite: requests hang, as on a network partition."""
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self):
        os.kill(self.pid, signal.SIGCONT)

    # ---- Blob REST ------------------------------------------------------------------

    def request(self, method, path, query=None, headers=None, body=b""):
        query = query or {}
        hdrs = {
            "x-ms-date": datetime.datetime.now(datetime.timezone.utc).strftime(
                "%a, %d %b %Y %H:%M:%S GMT"),
            "x-ms-version": "2021-08-06",
        }
        hdrs.update(headers or {})
        url_path = "/%s/%s" % (self.account, urllib.parse.quote(path, safe="/"))
        canon_headers = "".join("%s:%s\n" % (k.lower(), v) for k, v in
                                sorted(hdrs.items(), key=lambda kv: kv[0].lower())
                                if k.lower().startswith("x-ms-"))
        canon_res = "/%s%s" % (self.account, url_path)
        for k in sorted(query, key=str.lower):
            canon_res += "\n%s:%s" % (k.lower(), query[k])
        length = str(len(body)) if body else ""
        sts = "\n".join([method, "", "", length, "", hdrs.get("Content-Type", ""), "", "",
                         hdrs.get("If-Match", ""), hdrs.get("If-None-Match", ""), "", ""])
        sts += "\n" + canon_headers + canon_res
        sig = base64.b64encode(hmac.new(self.key, sts.encode(), hashlib.sha256).digest())
        hdrs["Authorization"] = "SharedKey %s:%s" % (self.account, sig.decode())
        url = url_path + ("?" + urllib.parse.urlencode(query) if query else "")
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        conn.request(method, url, body=body or None, headers=hdrs)
        r = conn.getresponse()
        data = r.read()
        conn.close()
        return r.status, dict(r.getheaders()), data

    def list(self, container, prefix=""):
        names, marker = [], None
        while True:
            q = {"restype": "container", "comp": "list", "prefix": prefix}
            if marker:
                q["marker"] = marker
            st, _, body = self.request("GET", container, q)
            assert st == 200, (st, body[:300])
            text = body.decode()
            names += [html_unescape(n) for n in re.findall(r"<Name>(.*?)</Name>", text)]
            m = re.search(r"<NextMarker>(.+?)</NextMarker>", text)
            if not m:
                return names
            marker = html_unescape(m.group(1))

    def get(self, container, name):
        st, _, body = self.request("GET", "%s/%s" % (container, name))
        assert st == 200, (st, name, body[:300])
        return body

    def break_lease(self, container, name):
        st, _, body = self.request("PUT", "%s/%s" % (container, name), {"comp": "lease"},
                                   {"x-ms-lease-action": "break", "x-ms-lease-break-period": "0"})
        assert st == 202, (st, body[:300])


def html_unescape(s):
    return (s.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"')
            .replace("&apos;", "'").replace("&amp;", "&"))
