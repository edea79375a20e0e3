"""The members of a cluster, finding the leader, and retrying a call
(docs/protocol.md §2, §4; the Go client's client.go: retry, moveOn, indexOf).

Calls go to the member believed to lead. UNAVAILABLE moves later calls to
the leader a NotLeader detail names (added to the members if new), or else
to the next member; every member is tried once, then the client backs off,
20 ms doubling to 1 s, between rounds. The caller reuses its request (same
request_id, same seq), so a retry never acts twice.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional, Sequence, TypeVar

import grpc

from . import _status
from .errors import CallError, ClosedError, IndeterminateError, InvalidError, UnreachableError
from .v1 import fence_pb2, fence_pb2_grpc

T = TypeVar("T")

# A member cut off without a TCP reset leaves a connection that looks fine;
# pings find it dead within ~3 s (as the Go client's keepalive). The server
# permits pings every second, with or without calls.
_CHANNEL_OPTIONS = [
    ("grpc.keepalive_time_ms", 2000),
    ("grpc.keepalive_timeout_ms", 1000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 1000),
]

# Codes after which the server may have acted on a call (Go's outcomeUnknown).
UNKNOWN_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED,
                           grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNKNOWN,
                           grpc.StatusCode.INTERNAL})


def outcome_unknown(err: Optional[BaseException]) -> bool:
    """Whether err leaves open whether the server acted."""
    if err is None:
        return False
    if isinstance(err, IndeterminateError):
        return True
    return isinstance(err, CallError) and err.code in UNKNOWN_CODES


class Member:
    def __init__(self, addr: str, creds: Optional[grpc.ChannelCredentials]) -> None:
        self.addr = addr
        if creds is None:
            self.channel = grpc.insecure_channel(addr, options=_CHANNEL_OPTIONS)
        else:
            self.channel = grpc.secure_channel(addr, creds, options=_CHANNEL_OPTIONS)
        self.stub = fence_pb2_grpc.FenceServiceStub(self.channel)


class Transport:
    """The members and the index of the one believed to lead. Thread-safe."""

    def __init__(self, addrs: Sequence[str], creds: Optional[grpc.ChannelCredentials]) -> None:
        self._creds = creds
        self._mu = threading.Lock()
        self._members = [Member(a, creds) for a in addrs]  # copy-on-write: grows only
        self._cur = 0
        self.closed = False

    def members(self) -> list[Member]:
        return self._members

    def current(self) -> tuple[int, Member]:
        """The index of the member calls go to now, and the member."""
        ms, i = self._members, self._cur
        return i, ms[i % len(ms)]

    def move_on(self, idx: int, err: Optional[BaseException]) -> None:
        """Sends later calls away from member idx after err: to the leader a
        NotLeader detail names, else to the next member. If another call
        moved them already, it does nothing."""
        to: Optional[int] = None
        if isinstance(err, grpc.RpcError):
            for d in _status.details(err):
                if isinstance(d, fence_pb2.NotLeader) and d.leader_addr:
                    to = self._index_of(d.leader_addr)
                    break
        with self._mu:
            if self._cur == idx:
                self._cur = to if to is not None else (idx + 1) % len(self._members)

    def _index_of(self, addr: str) -> int:
        with self._mu:
            for i, m in enumerate(self._members):
                if m.addr == addr:
                    return i
            self._members = [*self._members, Member(addr, self._creds)]
            return len(self._members) - 1

    def wait_ready(self, timeout: float) -> None:
        """Waits until one member's channel is connected, or raises UnreachableError."""
        ready = threading.Event()
        futures = []
        for i, m in enumerate(self._members):
            f = grpc.channel_ready_future(m.channel)

            def done(_f: object, i: int = i) -> None:
                with self._mu:
                    if not ready.is_set():
                        self._cur = i
                ready.set()
            f.add_done_callback(done)
            futures.append(f)
        ok = ready.wait(timeout)
        for f in futures:
            f.cancel()
        if not ok:
            raise UnreachableError(
                f"cannot reach a fence server: no member connected within {timeout:g}s "
                f"({', '.join(m.addr for m in self._members)}; is 'fence serve' running there, "
                "is it the --grpc-addr, and does --insecure match the server's?)")

    def retry(self, call: Callable[[fence_pb2_grpc.FenceServiceStub, Optional[float]], T],
              deadline: Optional[float]) -> T:
        """Runs call(stub, timeout) on the leader until it succeeds, fails for
        good, or deadline (time.monotonic()) passes. UNAVAILABLE moves on
        (every member once, then backoff); CANCELLED and DEADLINE_EXCEEDED
        are retried while the deadline has not passed. It raises InvalidError,
        UnreachableError (UNIMPLEMENTED: not a fence port), CallError for other
        refusals, and IndeterminateError when the deadline passes first."""
        delay = 0.02
        tried = 1
        while True:
            if self.closed:
                raise ClosedError("fence: client closed")
            idx, m = self.current()
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return call(m.stub, timeout)
            except grpc.RpcError as e:
                err = e
            code = _status.code(err)
            msg = _status.message_of(err)
            if code == grpc.StatusCode.UNAVAILABLE:
                self.move_on(idx, err)
            elif code in (grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED):
                if deadline is not None and time.monotonic() >= deadline:
                    raise IndeterminateError(f"{msg} (at {m.addr}; the call's time ran out)", code)
            elif code == grpc.StatusCode.INVALID_ARGUMENT:
                raise InvalidError("invalid argument: " + msg.removeprefix("invalid: "))
            elif code == grpc.StatusCode.UNIMPLEMENTED:
                raise UnreachableError(
                    f"{m.addr} does not serve this call: is it fence's gRPC port (--grpc-addr, default 7300) "
                    "and not its metrics port, and a fence at least as new as this client?")
            else:
                raise CallError(msg, code, _status.details(err))
            if tried < len(self._members):
                tried += 1
                continue  # the next member at once
            tried = 1
            if deadline is not None and time.monotonic() + delay >= deadline:
                time.sleep(max(0.0, deadline - time.monotonic()))
                raise IndeterminateError(f"the call's time ran out (last error, at {m.addr}: {code.name}: {msg})", code)
            time.sleep(delay)
            delay = min(2 * delay, 1.0)

    def close(self) -> None:
        self.closed = True
        for m in self._members:
            m.channel.close()
