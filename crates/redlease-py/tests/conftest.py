"""Real redis-server processes on free loopback ports, as the Rust tests
start them: one per test that asks, stopped by pid at its end."""

import os
import shutil
import socket
import subprocess
import time

import pytest

import redlease


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self) -> None:
        program = os.environ.get("REDLEASE_SERVER") or shutil.which("redis-server")
        if program is None:
            pytest.skip("no redis-server on PATH")
        self.port = _free_port()
        self.proc = subprocess.Popen(
            [program, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("redis-server did not start")
                time.sleep(0.02)
        self.url = f"redis://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)


@pytest.fixture
def server():
    s = Server()
    yield s
    s.stop()


@pytest.fixture
def servers():
    started = [Server() for _ in range(3)]
    yield started
    for s in started:
        s.stop()


def make_locker(urls, **settings) -> redlease.Locker:
    settings.setdefault("restart_quarantine", 0)  # brand-new test servers
    settings.setdefault("ttl", 5)
    return redlease.Locker(urls, **settings)
