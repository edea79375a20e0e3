#!/usr/bin/env python3
"""The Python client's conformance adapter: test/conformance/ADAPTER.md.

The harness starts it with FENCE_SERVERS (comma-separated host:port) and
FENCE_INSECURE=1, writes one JSON command a line to stdin, and reads one JSON
reply (in command order) or event a line from stdout. Commands run one at a
time, in order; "ended" events come from one watcher thread per held lock.
It exits 0 when stdin closes or after "close".
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import grpc  # noqa: F401
except ImportError:  # an interpreter without Debian's packages (a pyenv python3 first in PATH, say)
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3", *sys.argv])
    raise

import fence  # noqa: E402

_out = threading.Lock()


def emit(obj: dict[str, Any]) -> None:
    """Writes one whole line and flushes it (replies and events share stdout)."""
    line = json.dumps(obj) + "\n"
    with _out:
        sys.stdout.write(line)
        sys.stdout.flush()


def kind_of(err: BaseException) -> str:
    if isinstance(err, fence.LockedError):
        return "locked"
    if isinstance(err, (fence.ExpiredError, fence.RevokedError, fence.ReleasedError, fence.ClosedError)):
        return "expired"
    if isinstance(err, fence.InvalidError):
        return "invalid"
    if isinstance(err, fence.UnreachableError):
        return "unavailable"
    if isinstance(err, fence.LockTimeoutError):
        return "timeout"
    return "other"


class Adapter:
    def __init__(self, client: fence.Client) -> None:
        self.client = client
        self.leases: dict[str, fence.Lease] = {}

    def handle(self, cmd: dict[str, Any]) -> bool:
        """Runs one command and writes its reply; False after close."""
        cid = cmd.get("id")
        op = cmd.get("op")
        try:
            if op == "lock":
                self.lock(cid, cmd)
            elif op == "status":
                self.status(cid, cmd)
            elif op == "release":
                self.release(cid, cmd)
            elif op == "close":
                self.client.close()
                emit({"id": cid, "ok": True})
                return False
            else:
                emit({"id": cid, "ok": False, "kind": "invalid", "error": f"unknown op {op!r}"})
        except Exception as e:  # every failure is a reply, never a crash
            emit({"id": cid, "ok": False, "kind": kind_of(e), "error": str(e) or type(e).__name__})
        return True

    def lock(self, cid: Any, cmd: dict[str, Any]) -> None:
        name = cmd.get("name", "")
        ttl_ms, timeout_ms = cmd.get("ttl_ms"), cmd.get("timeout_ms")
        lease = self.client.lock(
            name,  # the client checks it (InvalidError)
            wait=bool(cmd.get("wait", True)),
            timeout=None if timeout_ms is None else timeout_ms / 1000,
            ttl=None if ttl_ms is None else ttl_ms / 1000)
        self.leases[lease.name] = lease
        emit({"id": cid, "ok": True, "token": lease.token, "lease_number": lease.lease_number})
        threading.Thread(target=self.watch, args=(lease,), daemon=True).start()

    def watch(self, lease: fence.Lease) -> None:
        """Sends "ended" once if the lease ends on its own (not released, not closed)."""
        lease.done.wait()
        err = lease.err()
        if err is None or isinstance(err, (fence.ReleasedError, fence.ClosedError)):
            return
        emit({"event": "ended", "name": lease.name, "kind": "revoked" if isinstance(err, fence.RevokedError) else "expired",
              "error": str(err)})

    def status(self, cid: Any, cmd: dict[str, Any]) -> None:
        lease: Optional[fence.Lease] = self.leases.get(cmd.get("name", ""))
        held = lease is not None and lease.err() is None
        emit({"id": cid, "ok": True, "held": held,
              "deadline_left_ms": int(lease.time_left() * 1000) if lease is not None and held else 0,
              "jeopardy": bool(lease.jeopardy()) if lease is not None and held else False})

    def release(self, cid: Any, cmd: dict[str, Any]) -> None:
        name = cmd.get("name", "")
        lease = self.leases.get(name)
        if lease is None:
            emit({"id": cid, "ok": False, "kind": "invalid", "error": f"no lock {name!r} was taken through this adapter"})
            return
        lease.release()
        emit({"id": cid, "ok": True})


def main() -> int:
    servers = [a for a in os.environ.get("FENCE_SERVERS", "").split(",") if a]
    insecure = os.environ.get("FENCE_INSECURE") == "1"
    try:
        # No wait for a connection here: a member that is not up yet makes
        # the first command fail ("unavailable"), not the adapter.
        client = fence.Client(servers, insecure=insecure, connect_timeout=None)
    except fence.FenceError as e:
        print(f"conformance_adapter: {e}", file=sys.stderr)
        return 1
    adapter = Adapter(client)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            cmd = json.loads(line)
            if not isinstance(cmd, dict):
                raise ValueError("a command is a JSON object")
        except ValueError as e:
            emit({"id": None, "ok": False, "kind": "invalid", "error": f"bad command line: {e}"})
            continue
        if not adapter.handle(cmd):
            return 0
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
