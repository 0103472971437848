"""Starts a real ``cudaperf serve`` on a free loopback port for the tests (no mocks).

The binary comes from ``CUDAPERF_BIN`` or ``target/debug/cudaperf`` (built by ``cargo
test`` / ``cargo build``); the tests build nothing themselves.
"""

import os
import re
import select
import signal
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


def start_server(*extra, timeout=60.0):
    """Starts `cudaperf serve --port 0`, reads the bound address from stdout."""
    log = open(REPO / "target" / "pytest-serve.log", "ab")
    proc = subprocess.Popen(
        [str(cudaperf_bin()), "serve", "--port", "0", "--tasks", str(REPO / "fixtures" / "tasks"), *extra],
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
