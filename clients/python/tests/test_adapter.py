"""conformance_adapter.py (test/conformance/ADAPTER.md) as a child process,
against a real server: the commands, the error kinds, the "ended" events,
and a holder paused with SIGSTOP whose lease the server lets expire."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from typing import Any, Callable, Iterator

import pytest

import fence
from conftest import PYDIR, Server

Make = Callable[..., fence.Client]
WAIT = 10.0


class Adapter:
    def __init__(self, servers: str) -> None:
        env = {**os.environ, "FENCE_SERVERS": servers, "FENCE_INSECURE": "1"}
        self.proc = subprocess.Popen([sys.executable, str(PYDIR / "conformance_adapter.py")], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, text=True)
        self.replies: "queue.Queue[dict[str, Any]]" = queue.Queue()
        self.events: "queue.Queue[dict[str, Any]]" = queue.Queue()
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            obj = json.loads(line)  # every line is one whole JSON object
            (self.events if "event" in obj else self.replies).put(obj)

    def send(self, op: str, **fields: Any) -> dict[str, Any]:
        self.next_id += 1
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"id": self.next_id, "op": op, **fields}) + "\n")
        self.proc.stdin.flush()
        r = self.replies.get(timeout=WAIT)
        assert r["id"] == self.next_id, r  # answered in order
        return r

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=WAIT)


@pytest.fixture
def adapter(server: Server) -> Iterator[Adapter]:
    a = Adapter(server.grpc)
    yield a
    a.kill()


def name() -> str:
    return "py/adapter/" + uuid.uuid4().hex[:10]


def test_commands_and_error_kinds(server: Server, adapter: Adapter, clients: Make) -> None:
    n = name()
    r = adapter.send("lock", name=n, ttl_ms=3000, wait=True, timeout_ms=10000)
    assert r["ok"] and r["token"] > 0 and r["lease_number"] > 0
    s = adapter.send("status", name=n)
    assert s["ok"] and s["held"] and 2000 < s["deadline_left_ms"] <= 2700 and s["jeopardy"] is False

    other = clients([server.grpc])
    held = other.lock(name(), timeout=10)
    r = adapter.send("lock", name=held.name, ttl_ms=3000, wait=False, timeout_ms=5000)
    assert (r["ok"], r["kind"]) == (False, "locked") and str(held.lease_number) in r["error"]
    r = adapter.send("lock", name=held.name, ttl_ms=3000, wait=True, timeout_ms=500)
    assert (r["ok"], r["kind"]) == (False, "timeout")
    r = adapter.send("lock", name="", ttl_ms=3000, wait=True, timeout_ms=1000)
    assert (r["ok"], r["kind"]) == (False, "invalid") and "empty" in r["error"]
    r = adapter.send("lock", name=name(), ttl_ms=100, wait=True, timeout_ms=1000)
    assert (r["ok"], r["kind"]) == (False, "invalid")  # below the server's 1 s
    r = adapter.send("status", name="never-taken")
    assert r == {"id": r["id"], "ok": True, "held": False, "deadline_left_ms": 0, "jeopardy": False}

    assert adapter.send("release", name=n)["ok"]
    s = adapter.send("status", name=n)
    assert (s["held"], s["deadline_left_ms"]) == (False, 0)
    assert not other.status(n).held
    assert adapter.send("close")["ok"]
    assert adapter.proc.wait(timeout=WAIT) == 0
    assert adapter.events.empty()  # a release is no "ended" event


def test_force_release_sends_a_revoked_event(server: Server, adapter: Adapter, clients: Make) -> None:
    n = name()
    assert adapter.send("lock", name=n, ttl_ms=1500, wait=True, timeout_ms=10000)["ok"]
    clients([server.grpc]).force_release(n, "adapter test")
    e = adapter.events.get(timeout=WAIT)
    assert (e["event"], e["name"], e["kind"]) == ("ended", n, "revoked")
    assert adapter.send("status", name=n)["held"] is False
    r = adapter.send("release", name=n)
    assert (r["ok"], r["kind"]) == (False, "expired")


def test_a_paused_holder_stops_at_its_deadline(server: Server, adapter: Adapter, clients: Make) -> None:
    n = name()
    first = adapter.send("lock", name=n, ttl_ms=2000, wait=True, timeout_ms=10000)
    assert first["ok"]
    os.kill(adapter.proc.pid, signal.SIGSTOP)  # no renewals: the server expires the lease after 2 s
    try:
        start = time.monotonic()
        rival = clients([server.grpc]).lock(n, timeout=10)  # lock-delay 0: granted at the server's expiry
        assert rival.token > first["token"]
        assert 1.5 < time.monotonic() - start < 8
    finally:
        os.kill(adapter.proc.pid, signal.SIGCONT)
    # Woken up past its deadline, the holder learns at once that it must stop.
    e = adapter.events.get(timeout=2.0)
    assert (e["event"], e["name"], e["kind"]) == ("ended", n, "expired")
    s = adapter.send("status", name=n)
    assert (s["held"], s["deadline_left_ms"], s["jeopardy"]) == (False, 0, False)
    r = adapter.send("release", name=n)
    assert (r["ok"], r["kind"]) == (False, "expired")
    assert rival.err() is None
    rival.release()


def test_exits_when_stdin_closes(adapter: Adapter) -> None:
    assert adapter.send("lock", name=name(), ttl_ms=3000, wait=True, timeout_ms=10000)["ok"]
    assert adapter.proc.stdin is not None
    adapter.proc.stdin.close()
    assert adapter.proc.wait(timeout=WAIT) == 0
