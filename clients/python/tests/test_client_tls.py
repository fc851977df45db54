"""HTTPS: a server started with --tls-cert and --tls-key, verified with the client's
ca_file. The CA and the server's certificate are made here with the openssl tool."""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import time

import pytest

import mutexd
from mutexd_testserver import servers

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl tool")


def _openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("pki"))
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/CN=mutexd test CA",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             "-addext", "subjectKeyIdentifier=hash", cwd=d)
    _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", "server.key", "-out", "server.csr",
             "-subj", "/CN=127.0.0.1", cwd=d)
    with open(os.path.join(d, "server.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                "basicConstraints=critical,CA:FALSE\n"
                "keyUsage=critical,digitalSignature\n"
                "extendedKeyUsage=serverAuth\n"
                "subjectKeyIdentifier=hash\n"
                "authorityKeyIdentifier=keyid,issuer\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "server.pem", "-days", "2",
             "-extfile", "server.ext", cwd=d)
    return {name: os.path.join(d, name) for name in ("ca.pem", "server.pem", "server.key")}


@pytest.fixture(scope="module")
def tls_server(pki):
    for start in servers():
        yield start("--tls-cert", pki["server.pem"], "--tls-key", pki["server.key"],
                    scheme="https")


def test_https_with_a_ca_file(tls_server, pki, name):
    assert tls_server.url.startswith("https://127.0.0.1:")
    with mutexd.Client(tls_server.url, ca_file=pki["ca.pem"], token="t0ken") as c:
        lease = c.acquire(name, ttl=1, metadata={"tls": True})
        assert c.get(name).holder.fencing_token == lease.fencing_token
        assert c.renew(lease).fencing_token == lease.fencing_token
        assert [s.resource for s in c.list(prefix=name)] == [name]
        c.release(lease)
        assert c.get(name).state == "free"
        assert len(c._transports[0]._idle) == 1  # one kept-alive TLS connection


def test_lock_over_https(tls_server, pki, name):
    with mutexd.Client(tls_server.url, ca_file=pki["ca.pem"]) as c:
        with c.lock(name, ttl=0.6) as lease:
            time.sleep(1.0)
            assert lease.renewals >= 2 and not lease.lost.is_set()
        assert c.get(name).state == "free"


def test_the_name_localhost_is_verified_too(tls_server, pki, name):
    port = tls_server.address.rsplit(":", 1)[1]
    with mutexd.Client("https://localhost:%s" % port, ca_file=pki["ca.pem"]) as c:
        assert c.get(name).state == "free"


def test_an_unknown_ca_is_refused(tls_server, name):
    context = ssl.create_default_context()  # the system's CAs do not know the test CA
    with mutexd.Client(tls_server.url, ssl_context=context, timeout=3) as c:
        with pytest.raises(mutexd.TransportError) as info:
            c.get(name)
    assert isinstance(info.value.__cause__, ssl.SSLError)


def test_plain_http_to_an_https_server_is_a_transport_error(tls_server, name):
    with mutexd.Client("http://" + tls_server.address, timeout=3) as c:
        with pytest.raises(mutexd.TransportError):
            c.get(name)
