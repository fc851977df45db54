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
