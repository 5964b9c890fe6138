"""Tests that need Memcached: the shared one at 127.0.0.1:11211 (.ci/run starts it), or a private
`memcached` process a test starts, stops and restarts itself. Outside CI a missing server or
binary skips them with a reason; under CI=true it fails them, so a skip never hides a lost test
(tests/required.py)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time

from levergate.testing.ports import free_port
from tests.required import missing

SHARED = ("127.0.0.1", 11211)


def _answers(address: tuple[str, int], timeout: float = 1.0) -> str | None:
    """None when a memcached answers `version` at `address`, else why not."""
    try:
        with socket.create_connection(address, timeout=timeout) as conn:
            conn.sendall(b"version\r\n")
            reply = conn.recv(64)
    except OSError as exc:
        return str(exc)
    return None if reply.startswith(b"VERSION") else f"unexpected reply {reply!r}"


def require_memcached() -> str:
    """The shared server's `host:port`."""
    reason = _answers(SHARED)
    if reason is not None:
        missing(f"Memcached not reachable at {SHARED[0]}:{SHARED[1]}: {reason}")
    return f"{SHARED[0]}:{SHARED[1]}"


class PrivateMemcached:
    """A `memcached` process of the test's own on a loopback port, so it can be stopped and
    restarted (which the shared server must never be)."""

    def __init__(self, *, item_bytes: int = 1024 * 1024) -> None:
        self.binary = shutil.which("memcached") or ""
        if not self.binary:
            missing("the memcached binary is not installed (apt-get install memcached)")
        self.port = free_port()
        self.item_bytes = item_bytes
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        args = [self.binary, "-l", "127.0.0.1", "-p", str(self.port), "-U", "0", "-m", "64",
                "-I", str(self.item_bytes), "-t", "1"]  # fmt: skip
        if os.geteuid() == 0:
            args += ["-u", "root"]
        self._process = subprocess.Popen(args, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while _answers(("127.0.0.1", self.port), timeout=0.2) is not None:
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                missing(f"memcached did not start on port {self.port}")
            time.sleep(0.02)

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=10)
            self._process = None
