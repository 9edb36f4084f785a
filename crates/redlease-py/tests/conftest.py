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
    """One redis-server; with ``tls`` (a ``Pki``), on a TLS port only,
    asking clients for a certificate when ``client_auth``."""

    def __init__(self, tls: "Pki | None" = None, client_auth: bool = False) -> None:
        program = os.environ.get("REDLEASE_SERVER") or shutil.which("redis-server")
        if program is None:
            pytest.skip("no redis-server on PATH")
        self.port = _free_port()
        listen = ["--port", str(self.port)]
        if tls is not None:
            listen = [
                "--port", "0", "--tls-port", str(self.port),
                "--tls-cert-file", tls.server_cert, "--tls-key-file", tls.server_key,
                "--tls-ca-cert-file", tls.ca,
                "--tls-auth-clients", "yes" if client_auth else "no",
            ]
        self.proc = subprocess.Popen(
            [program, *listen, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
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
        scheme = "redis" if tls is None else "rediss"
        self.url = f"{scheme}://127.0.0.1:{self.port}"

    def command(self, *args: str) -> bytes:
        """One command's raw reply (plain TCP, for the tests' own looks)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            out = b"*%d\r\n" % len(args)
            for a in args:
                a = a.encode()
                out += b"$%d\r\n%s\r\n" % (len(a), a)
            s.sendall(out)
            f = s.makefile("rb")
            line = f.readline()
            if line.startswith(b"$") and not line.startswith(b"$-1"):
                return f.read(int(line[1:]) + 2)[:-2]
            return line.rstrip(b"\r\n")

    def commands_processed(self) -> int:
        """The server's count of commands processed (INFO stats)."""
        info = self.command("INFO", "stats").decode()
        for line in info.splitlines():
            if line.startswith("total_commands_processed:"):
                return int(line.split(":")[1])
        raise RuntimeError("no total_commands_processed in INFO")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)


class Pki:
    """A CA, a server certificate for 127.0.0.1 and a client certificate,
    made with the openssl command in ``directory``."""

    def __init__(self, directory: str) -> None:
        if shutil.which("openssl") is None:
            pytest.skip("no openssl command")
        d = directory

        def run(*args: str) -> None:
            subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

        self.ca, ca_key = f"{d}/ca.crt", f"{d}/ca.key"
        run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out",
            self.ca, "-days", "2", "-subj", "/CN=redlease test CA")
        # Version 3 certificates (extensions): rustls takes no other.
        with open(f"{d}/server.ext", "w") as f:
            f.write("subjectAltName=IP:127.0.0.1\n")
        with open(f"{d}/client.ext", "w") as f:
            f.write("extendedKeyUsage=clientAuth\n")
        for who in ("server", "client"):
            key, csr, crt = f"{d}/{who}.key", f"{d}/{who}.csr", f"{d}/{who}.crt"
            run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr,
                "-subj", f"/CN=redlease test {who}")
            ext = ["-extfile", f"{d}/{who}.ext"]
            run("x509", "-req", "-in", csr, "-CA", self.ca, "-CAkey", ca_key,
                "-CAcreateserial", "-out", crt, "-days", "2", *ext)
        # And the client's key certified as version 1 (no extensions),
        # which rustls never presents.
        self.v1_client_cert = f"{d}/client-v1.crt"
        run("x509", "-req", "-in", f"{d}/client.csr", "-CA", self.ca, "-CAkey", ca_key,
            "-CAcreateserial", "-out", self.v1_client_cert, "-days", "2")
        self.server_cert, self.server_key = f"{d}/server.crt", f"{d}/server.key"
        self.client_cert, self.client_key = f"{d}/client.crt", f"{d}/client.key"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return Pki(str(tmp_path_factory.mktemp("pki")))


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


def eventually(check, timeout: float = 10.0, what: str = "the condition"):
    """``check()``'s first true value, looked for every 20 ms for at most
    ``timeout`` seconds (then the test fails, naming ``what``)."""
    deadline = time.monotonic() + timeout
    for _ in range(int(timeout / 0.02) + 1):
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            break
        time.sleep(0.02)
    pytest.fail(f"{what} did not happen within {timeout} s")
