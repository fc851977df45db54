"""Starts and stops a real mutexd for the tests.

The binary is MUTEXD_BIN, else build/mutexd at the root of the repository. Each server
listens on a free loopback port (or the one a test gives it), keeps its data in a fresh
temporary directory, and is stopped with SIGTERM (it must exit 0) or killed with SIGKILL
when a test says so.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Optional

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BIN = os.environ.get("MUTEXD_BIN") or os.path.join(ROOT, "build", "mutexd")
if not os.path.isabs(BIN):
    BIN = os.path.join(ROOT, BIN)

# Short TTLs make the renewal tests fast: 500 ms is the shortest lease these servers grant.
BASE_ARGS = ["--min-ttl-ms", "500", "--threads", "4"]

_STARTED = re.compile(r'msg="started".* address=(\S+)')


class MutexdServer:
    """One mutexd process."""

    def __init__(
        self, args: Sequence[str] = (), scheme: str = "http", listen: str = "127.0.0.1:0"
    ) -> None:
        self.args = list(args)
        self.scheme = scheme
        self.listen = listen
        self.data_dir = tempfile.mkdtemp(prefix="mutexd-pytest-")
        self.proc: Optional[subprocess.Popen] = None
        self.lines: list[str] = []
        self.address: Optional[str] = None
        self._started = threading.Event()

    @property
    def url(self) -> str:
        assert self.address is not None
        return "%s://%s" % (self.scheme, self.address)

    def start(self, timeout: float = 15.0) -> "MutexdServer":
        if not os.path.exists(BIN):
            raise RuntimeError("no mutexd binary at %s (run make build, or set MUTEXD_BIN)" % BIN)
        cmd = [BIN, "--listen", self.listen, "--data-dir", self.data_dir] + self.args
        try:
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                text=True, errors="replace",
            )
        except OSError:
            self._cleanup()
            raise
        threading.Thread(target=self._read, daemon=True).start()
        if not self._started.wait(timeout) or self.address is None:
            self.kill()
            self._cleanup()
            raise RuntimeError("mutexd did not start:\n" + "\n".join(self.lines))
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            line = line.rstrip("\n")
            self.lines.append(line)
            m = _STARTED.search(line)
            if m and self.address is None:
                self.address = m.group(1)
                self._started.set()
        self._started.set()

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def terminate(self, timeout: float = 20.0) -> int:
        """SIGTERM; returns the exit status."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("mutexd did not stop within %s s:\n%s" % (timeout, self.log()))

    def kill(self) -> None:
        """SIGKILL, as a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        """Stops the server (SIGTERM, must exit 0 unless it was killed) and removes its data."""
        try:
            if self.proc is not None:
                killed = self.proc.returncode == -signal.SIGKILL
                rc = self.terminate()
                if not killed:
                    assert rc == 0, "mutexd exited %s:\n%s" % (rc, self.log())
        finally:
            self._cleanup()

    def _cleanup(self) -> None:
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def log(self) -> str:
        return "\n".join(self.lines[-60:])


def servers(base_args: Sequence[str] = BASE_ARGS) -> Iterator[Callable[..., MutexdServer]]:
    """For a fixture: yields start(*args, scheme="http", listen="127.0.0.1:0"), which
    starts a server with base_args + args; every server started is stopped afterwards (and
    its exit checked)."""
    started: list[MutexdServer] = []

    def start(*args: str, scheme: str = "http", listen: str = "127.0.0.1:0") -> MutexdServer:
        server = MutexdServer(list(base_args) + list(args), scheme=scheme, listen=listen)
        started.append(server)
        return server.start()

    yield start
    errors = []
    for server in started:
        try:
            server.stop()
        except AssertionError as exc:
            errors.append(str(exc))
    assert not errors, "\n".join(errors)
