"""Real fence servers for the tests: the binary is built once per session
(go build ./cmd/fence from the repository root), servers run on free loopback
ports with --insecure, and only the processes started here are killed, by pid.

Without Go the server tests are skipped, unless FENCE_REQUIRE_PYTHON=1
(then they fail: CI must run them).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Callable, Iterator, Optional, TypeVar

import pytest

HERE = Path(__file__).resolve().parent
PYDIR = HERE.parent
ROOT = PYDIR.parent.parent
sys.path.insert(0, str(PYDIR))

import fence  # noqa: E402

REQUIRED = os.environ.get("FENCE_REQUIRE_PYTHON") == "1"
T = TypeVar("T")


def until(what: str, cond: Callable[[], Optional[T]], timeout: float = 10.0, every: float = 0.02) -> T:
    """Polls cond until it returns a true value, for at most timeout seconds."""
    end = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(every)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _go() -> Optional[str]:
    return shutil.which("go") or next((p for p in ("/usr/local/go/bin/go",) if os.path.exists(p)), None)


@pytest.fixture(scope="session")
def fence_bin(tmp_path_factory: pytest.TempPathFactory) -> str:
    go = _go()
    if go is None:
        if REQUIRED:
            pytest.fail("FENCE_REQUIRE_PYTHON=1 but Go is not installed: cannot build the fence server")
        pytest.skip("Go is not installed: cannot build the fence server")
    out = tmp_path_factory.mktemp("bin") / "fence"
    r = subprocess.run([go, "build", "-o", str(out), "./cmd/fence"], cwd=ROOT, capture_output=True, text=True,
                       timeout=600)
    if r.returncode != 0:
        pytest.fail(f"go build ./cmd/fence failed:\n{r.stderr}")
    return str(out)


class Server:
    """One `fence serve --insecure` process on free loopback ports."""

    def __init__(self, binary: str, data: Path, node_id: str = "node1", extra: tuple[str, ...] = (),
                 tls: bool = False) -> None:
        """tls: the dev setup's TLS (certificates made in <data>/data/tls) instead of --insecure."""
        self.binary, self.data, self.node_id, self.tls = binary, data, node_id, tls
        self.grpc = f"127.0.0.1:{free_port()}"
        self.metrics = f"127.0.0.1:{free_port()}"
        self.raft = f"127.0.0.1:{free_port()}"
        self.extra = extra
        self.proc: Optional[subprocess.Popen[bytes]] = None

    def spawn(self, bootstrap: Optional[str] = None) -> None:
        """Starts the process (a cluster's members all start before any can lead)."""
        args = [self.binary, "serve", *([] if self.tls else ["--insecure"]), "--node-id", self.node_id,
                "--data-dir", str(self.data / "data"), "--grpc-addr", self.grpc, "--metrics-addr", self.metrics,
                "--raft-addr", self.raft, "--log-level", "warn", "--lock-delay", "0", *self.extra]
        if bootstrap:
            args += ["--bootstrap", bootstrap]
        self.data.mkdir(parents=True, exist_ok=True)
        with open(self.data / "server.log", "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=log, env={**os.environ, "GOMAXPROCS": "2"})

    def start(self) -> "Server":
        self.spawn()
        self.wait_serving()
        return self

    def wait_serving(self) -> None:
        until(f"{self.node_id} to serve (/healthz)", lambda: self.http("/healthz"), timeout=20)

    def http(self, path: str) -> Optional[str]:
        """GET path on the metrics port; None unless it answers 200."""
        ctx = None
        if self.tls:
            ctx = ssl.create_default_context(cafile=str(self.tls_file("ca.crt"))) if self.tls_file("ca.crt").exists() else None
            if ctx is None:
                return None  # the dev CA is not written yet
        try:
            with urllib.request.urlopen(f"{'https' if self.tls else 'http'}://{self.metrics}{path}", timeout=1,
                                        context=ctx) as r:
                return str(r.read().decode()) if r.status == 200 else None
        except OSError:
            return None

    def tls_file(self, name: str) -> Path:
        return self.data / "data" / "tls" / name

    def leads(self) -> bool:
        return self.http("/leaderz") is not None

    def metric(self, name: str) -> float:
        text = self.http("/metrics") or ""
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise AssertionError(f"no metric {name} at {self.metrics}")

    def cli(self, *args: str, servers: Optional[str] = None) -> str:
        r = subprocess.run([self.binary, "--insecure", "--server", servers or self.grpc, *args],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, f"fence {' '.join(args)}: {r.stderr}"
        return r.stdout + r.stderr

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None

    def log_tail(self) -> str:
        try:
            return (self.data / "server.log").read_text(errors="replace")[-3000:]
        except OSError:
            return ""


@pytest.fixture(scope="session")
def server(fence_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One single-node server shared by the tests (each uses its own lock names)."""
    s = Server(fence_bin, tmp_path_factory.mktemp("node")).start()
    until("the node to lead", s.leads, timeout=20)
    yield s
    s.kill()


@pytest.fixture
def fresh_server(fence_bin: str, tmp_path: Path) -> Iterator[Server]:
    """A single-node server of the test's own (for counting leases and tokens)."""
    s = Server(fence_bin, tmp_path / "node").start()
    until("the node to lead", s.leads, timeout=20)
    yield s
    s.kill()


@pytest.fixture
def cluster(fence_bin: str, tmp_path: Path) -> Iterator[list[Server]]:
    """Three members bootstrapped together (as test/e2e's newCluster)."""
    nodes = [Server(fence_bin, tmp_path / f"n{i}", node_id=f"n{i}") for i in (1, 2, 3)]
    peers = ",".join(f"{n.node_id}={n.raft}" for n in nodes)
    try:
        for n in nodes:
            n.spawn(bootstrap=peers)
        for n in nodes:
            n.wait_serving()
        until("a leader", lambda: any(n.leads() for n in nodes), timeout=20)
        yield nodes
    finally:
        for n in nodes:
            n.kill()


@pytest.fixture
def clients() -> Iterator[Callable[..., fence.Client]]:
    """Makes clients that are closed after the test."""
    made: list[fence.Client] = []

    def make(servers: list[str], **kw: object) -> fence.Client:
        c = fence.Client(servers, insecure=True, **kw)  # type: ignore[arg-type]
        made.append(c)
        return c
    yield make
    for c in made:
        c.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Under FENCE_REQUIRE_PYTHON=1 a skipped test is a failed one."""
    outcome = yield
    rep = outcome.get_result()  # type: ignore[attr-defined]
    if REQUIRED and rep.skipped:
        rep.outcome = "failed"
        rep.longrepr = f"skipped, and FENCE_REQUIRE_PYTHON=1 forbids skipping: {rep.longrepr}"
