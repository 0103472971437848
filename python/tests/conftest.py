"""Starts a real ``cudaperf serve`` on a free loopback port for the tests (no mocks).

The binary comes from ``CUDAPERF_BIN`` or ``target/debug/cudaperf`` (built by ``cargo
test`` / ``cargo build``); the tests build nothing themselves.
"""

import os
import re
import select
import signal
import socket
import shutil
import tempfile
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))


def cudaperf_bin() -> Path:
    p = Path(os.environ.get("CUDAPERF_BIN") or REPO / "target" / "debug" / "cudaperf")
    if not p.is_file():
        pytest.fail(f"no cudaperf binary at {p}: run `cargo build` first or set CUDAPERF_BIN")
    return p


def free_port():
    """A free loopback port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(*extra, port=0, timeout=60.0):
    """Starts `cudaperf serve --port PORT` (0: any), reads the bound address from stdout."""
    log = open(REPO / "target" / "pytest-serve.log", "ab")
    proc = subprocess.Popen(
        [str(cudaperf_bin()), "serve", "--port", str(port), "--tasks", str(REPO / "fixtures" / "tasks"), *extra],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=log,
        env={**os.environ, "CUDAPERF_WORKER": str(cudaperf_bin())},
    )
    deadline = time.monotonic() + timeout
    line = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            line = proc.stdout.readline()
            break
        if proc.poll() is not None:
            break
    m = re.search(rb"http://(\S+)", line)
    if not m:
        proc.kill()
        proc.wait(timeout=10)
        pytest.fail(f"cudaperf serve did not start (stdout: {line!r}); see target/pytest-serve.log")
    return proc, "http://" + m.group(1).decode()


def stop_server(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
        raise


@pytest.fixture(scope="session")
def server_url():
    proc, url = start_server("--no-gpu")
    yield url
    code = stop_server(proc)
    assert code == 0, f"cudaperf serve exited with {code} on SIGTERM"


@pytest.fixture(scope="session")
def repo():
    return REPO


def metric(url, name, **labels):
    """The sum of a Prometheus sample of the server over the label sets that match."""
    import urllib.request

    text = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        if head != name and not head.startswith(name + "{"):
            continue
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
    return total


class Redis:
    """A real redis-server on a free loopback port, without persistence."""

    def __init__(self):
        exe = shutil.which("redis-server")
        if exe is None:
            pytest.fail("redis-server is not installed: apt-get install -y redis-server (.ci/run does)")
        self.port = free_port()
        self.dir = tempfile.mkdtemp()
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            cwd=self.dir,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.05)
        self.stop()
        pytest.fail(f"redis-server did not answer on {self.port}")

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}"

    def stop(self):
        self.proc.kill()
        self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


def start_node(queue_url, name):
    """Starts `cudaperf node` on the queue (CPU stages only); returns it once consuming."""
    log = open(REPO / "target" / "pytest-node.log", "ab")
    proc = subprocess.Popen(
        [str(cudaperf_bin()), "node", "--queue", queue_url, "--tasks", str(REPO / "fixtures" / "tasks"),
         "--no-gpu", "--name", name],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=log,
        env={**os.environ, "CUDAPERF_WORKER": str(cudaperf_bin())},
    )
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    line = proc.stdout.readline() if ready else b""
    if b"consuming" not in line:
        proc.kill()
        pytest.fail(f"cudaperf node did not start: {line!r}")
    return proc
