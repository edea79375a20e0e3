"""One server lease (a session), shared by the locks a Client holds with the
same TTL and margin (the Go client's session.go, calls.go and the settling
half of client.go). docs/protocol.md §4–§6 are the rules; the comments name
the rule each part follows.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from typing import Callable, Iterator, Optional, Protocol, TypeVar, cast

import grpc
from google.protobuf import duration_pb2

from . import _rules, _status
from ._rules import Calls, Clock, Deadline
from ._transport import Transport, outcome_unknown
from .errors import (CallError, ExpiredError, FenceError, LeaseAbandonedError, LockedError,
                     LockTimeoutError, LostContactError, RevokedError)
from .v1 import fence_pb2, fence_pb2_grpc

T = TypeVar("T")

# §4: an unknown outcome is settled by re-sending the same request, one
# attempt at most SETTLE_ATTEMPT long, for SETTLE_FOR in all (the Go client's figures).
SETTLE_ATTEMPT = 1.0
SETTLE_FOR = 5.0
# The renewal thread looks at the clock at least this often, so a deadline
# passed during a suspend or a SIGSTOP ends the lease as soon as it runs again.
POLL = 0.25
_STOP = object()
_Msg = tuple[str, int, object]  # ("resp" | "err", stream id, answer or error), from a stream's reader


def new_request_id() -> bytes:
    """16 random bytes, not all zero (§3)."""
    while True:
        b = os.urandom(16)
        if any(b):
            return b


def seconds(d: duration_pb2.Duration) -> float:
    return d.seconds + d.nanos / 1e9


def refusal_code(err: Optional[BaseException]) -> Optional[grpc.StatusCode]:
    """The gRPC code of a definitive refusal (a CallError), else None."""
    return err.code if isinstance(err, CallError) else None


class Grant(Protocol):
    """What a session needs of a Lease (client.Lease)."""
    name: str
    token: int

    def _finish(self) -> None: ...

    def _revoke(self, err: FenceError) -> None: ...


class _Claim:
    """Marks a name as taken by one caller of the session."""

    def __init__(self, multi: bool = False) -> None:
        self.done = threading.Event()
        self.multi = multi  # a permit or a reader's grant: others of its kind use the next lane
        self.token = 0


class NextLane(Exception):
    """The name is taken in this session by a caller whose grant may be held
    beside others (a permit, a reader's), or this caller's may: ask in the
    next lane rather than wait locally. A writer that waited here for its own
    Client's reader would be in no queue on the server, and readers that came
    after it would pass it."""


class _Stream:
    """One KeepAlive stream: requests go through a queue, a reader thread
    puts the answers (and the stream's end) into the session's inbox."""

    def __init__(self, sid: int, idx: int, stub: fence_pb2_grpc.FenceServiceStub, inbox: "queue.Queue[object]") -> None:
        self.sid, self.idx = sid, idx
        self._reqs: "queue.Queue[Optional[fence_pb2.KeepAliveRequest]]" = queue.Queue()
        self._call = stub.KeepAlive(self._requests())
        threading.Thread(target=self._read, args=(inbox,), name=f"fence-keepalive-{sid}", daemon=True).start()

    def _requests(self) -> Iterator[fence_pb2.KeepAliveRequest]:
        while True:
            r = self._reqs.get()
            if r is None:
                return
            yield r

    def _read(self, inbox: "queue.Queue[object]") -> None:
        try:
            for r in self._call:
                inbox.put(("resp", self.sid, r))
            inbox.put(("err", self.sid, "renewal stream closed by the server"))
        except grpc.RpcError as e:
            inbox.put(("err", self.sid, e))

    def send(self, req: fence_pb2.KeepAliveRequest) -> None:
        self._reqs.put(req)

    def close(self) -> None:
        self._reqs.put(None)
        self._call.cancel()


def _describe(err: object) -> str:
    if isinstance(err, grpc.RpcError):
        return f"{_status.code(err).name}: {_status.message_of(err)}"
    return str(err)


class Session:
    """A server lease. It renews itself every ttl/3 on one KeepAlive stream
    and ends at its local deadline unless a renewal succeeded (§6)."""

    def __init__(self, transport: Transport, clock: Clock, ttl: float, margin: float, owner: str,
                 resp: fence_pb2.CreateLeaseResponse, sent: float, on_end: Callable[["Session"], None],
                 settle_for: float = SETTLE_FOR) -> None:
        self._t, self._clk = transport, clock
        self.ttl, self.margin, self.owner = ttl, margin, owner
        self.lane = 0  # set by the Client: see client._SessionKey
        self.secret: bytes = resp.lease_secret
        self.number: int = resp.lease_number
        self.calls = Calls()
        self.settle_for = settle_for
        self._on_end = on_end
        self._mu = threading.Lock()
        # §6.2: counted from CreateLease's FIRST attempt's send time, with the TTL the server answered.
        self._deadline = Deadline(sent, seconds(resp.ttl), margin)
        self._failing: Optional[str] = None  # the last renewal error while renewals fail
        self._err: Optional[FenceError] = None  # why the session ended
        self.ended = threading.Event()
        self._names: dict[str, _Claim] = {}
        self._grants: dict[Grant, float] = {}  # live grants, by when their answer arrived
        self._inbox: "queue.Queue[object]" = queue.Queue()
        self._thread = threading.Thread(target=self._renew, args=(sent,), name=f"fence-lease-{self.number}", daemon=True)
        self._thread.start()

    # --- the deadline and the end (§6.2, §6.3) ---

    def check(self) -> None:
        """Ends the session if its deadline has passed. Called by the renewal
        thread and by Lease.err, so a process that was paused learns of the
        expiry on its first look."""
        with self._mu:
            if self._err is not None or not self._deadline.passed(self._clk.now()):
                return
            failing = self._failing
        if failing is not None:
            self.end(LostContactError(f"lease #{self.number} expired: no renewal succeeded before the local "
                                      f"deadline; last renewal error: {failing}"))
        else:
            self.end(ExpiredError(f"lease #{self.number} expired: no renewal succeeded within the TTL ({self.ttl:g}s)"))

    def end(self, err: FenceError) -> None:
        """Stops the session for good and ends its leases with err."""
        with self._mu:
            if self._err is not None:
                return
            self._err = err
            grants = list(self._grants)
        self.ended.set()
        self._inbox.put(_STOP)
        self._on_end(self)
        for g in grants:
            g._finish()

    def end_err(self) -> Optional[FenceError]:
        """Why the session ended (None while it lives), checking the deadline first."""
        self.check()
        with self._mu:
            return self._err

    def jeopardy(self) -> Optional[str]:
        with self._mu:
            return self._failing

    def deadline(self) -> float:
        with self._mu:
            return self._deadline.at

    def time_left(self) -> float:
        with self._mu:
            return self._deadline.left(self._clk.now())

    def _renewed(self, sent: float, ttl: float) -> None:
        with self._mu:
            if self._err is None and self._deadline.renewed(sent, ttl, self._clk.now()):
                self._failing = None

    def _renew_failed(self, err: object) -> None:
        with self._mu:
            self._failing = _describe(err)

    def track(self, g: Grant) -> None:
        with self._mu:
            self._grants[g] = self._clk.now()

    def untrack(self, g: Grant) -> None:
        with self._mu:
            self._grants.pop(g, None)

    def _check_held(self, sent: float, held: list[int]) -> None:
        """§6.7: a grant whose answer arrived before this renewal was sent and
        whose token the answer lacks was force-released: end that lock alone."""
        with self._mu:
            gone = [g for g, at in self._grants.items() if at < sent and g.token not in held]
        for g in gone:
            g._revoke(RevokedError(f"an admin force-released lock {g.name!r} (token {g.token}); "
                                   f"lease #{self.number} lives on"))

    # --- the renewal loop (§6.4–§6.8) ---

    def _next(self, until: float) -> object:
        """The next message of the inbox before until (clock time): a stream
        message, None when until comes first, or _STOP when the session ended."""
        while True:
            self.check()
            if self.ended.is_set():
                return _STOP
            now = self._clk.now()
            if now >= until:
                return None
            wait = min(until - now, max(self._deadline.at - now, 0.001), POLL)
            try:
                m = self._inbox.get(timeout=wait)
            except queue.Empty:
                continue
            return _STOP if m is _STOP else m

    def _renew(self, created: float) -> None:
        interval = _rules.renew_interval(self.ttl)
        retry = _rules.retry_every(self.ttl)
        stream: Optional[_Stream] = None
        sids = 0
        seq = 0
        next_at = created + interval  # the CreateLease counts as the first renewal sent

        def drop(err: object) -> None:  # the next stream goes to the next member (§6.5, §6.8)
            nonlocal stream
            if stream is not None:
                stream.close()
                self._t.move_on(stream.idx, err if isinstance(err, BaseException) else None)
            stream = None

        try:
            while True:
                # Idle until the next renewal; a stream that ends meanwhile is
                # dropped, and after UNAVAILABLE (it does not lead, or could not
                # commit) the client renews at once on the leader (§6.8).
                while True:
                    m = self._next(next_at)
                    if m is _STOP:
                        return
                    if m is None:
                        break
                    kind, sid, payload = cast(_Msg, m)
                    if stream is not None and sid == stream.sid and kind == "err":
                        drop(payload)
                        if isinstance(payload, grpc.RpcError) and _status.code(payload) == grpc.StatusCode.UNAVAILABLE:
                            next_at = self._clk.now()
                if stream is None:
                    sids += 1
                    idx, member = self._t.current()
                    stream = _Stream(sids, idx, member.stub, self._inbox)
                seq += 1
                sent = self._clk.now()
                stream.send(fence_pb2.KeepAliveRequest(lease_secret=self.secret, seq=seq))
                patience = sent + interval  # §6.5
                failure: object = None
                while True:
                    m = self._next(patience)
                    if m is _STOP:
                        return
                    if m is None:
                        failure = f"no answer to a renewal within TTL/3 ({interval:g}s)"
                        break
                    kind, sid, payload = cast(_Msg, m)
                    if sid != stream.sid:
                        continue  # from a stream dropped earlier
                    if kind == "err":
                        failure = payload
                        break
                    r = cast(fence_pb2.KeepAliveResponse, payload)
                    if r.seq != seq:
                        continue  # §6.6: the answer to a renewal given up on
                    break
                if failure is not None:
                    was_failing = self.jeopardy() is not None
                    drop(failure)
                    self._renew_failed(failure)
                    at_once = (not was_failing and isinstance(failure, grpc.RpcError)
                               and _status.code(failure) == grpc.StatusCode.UNAVAILABLE)
                    next_at = self._clk.now() + (0 if at_once else retry)  # §6.4
                    continue
                if not r.ok and not r.error:  # §6.7: the lease has ended
                    self.end(ExpiredError(f"the server ended lease #{self.number} (it expired, or an admin revoked it)"))
                    return
                if not r.ok:  # §6.7: this request was malformed; the stream carries on, the lease is not renewed
                    self._renew_failed(f"the server refused the renewal: {r.error}")
                    next_at = self._clk.now() + retry
                    continue
                next_at = sent + interval  # §6.4
                self._renewed(sent, seconds(r.ttl))
                self._check_held(sent, list(r.held_tokens))
        finally:
            if stream is not None:
                stream.close()

    # --- local claims: one holder of a name per session ---

    def claim(self, name: str, wait: bool, deadline: Optional[float],
              multi: bool = False) -> tuple[Callable[[], None], Callable[[int], None]]:
        """Makes this caller the only local holder of name in this session,
        waiting for another local holder to let go (or, with wait=False,
        raising LockedError at once); raising NextLane if either of the two is
        multi (a permit or a reader's grant). Returns unclaim and
        granted(token)."""
        while True:
            with self._mu:
                busy = self._names.get(name)
                if busy is not None and (multi or busy.multi):
                    raise NextLane()
                if busy is None:
                    mine = _Claim(multi)
                    self._names[name] = mine
                    break
                token = busy.token
            if not wait:
                raise LockedError(name, self.number, self.owner, token, local=True)
            while not busy.done.wait(0.05):
                err = self.end_err()
                if err is not None:
                    raise err
                if deadline is not None and time.monotonic() >= deadline:
                    raise LockTimeoutError(f"lock {name!r}: timed out waiting for another caller of this Client to let go")

        def unclaim() -> None:
            with self._mu:
                if self._names.get(name) is mine:
                    del self._names[name]
            mine.done.set()

        def granted(token: int) -> None:
            with self._mu:
                mine.token = token
        return unclaim, granted

    # --- numbered calls (§5) and settling their outcomes (§4) ---

    def acquire_request(self, name: str, wait: bool, lock_delay: Optional[float], permits: int = 0,
                        shared: bool = False) -> fence_pb2.AcquireRequest:
        """A new numbered Acquire; it is re-sent unchanged on every retry."""
        seq = self.calls.begin()
        ack, open_ = self.calls.acks(seq)
        req = fence_pb2.AcquireRequest(request_id=new_request_id(), lease_secret=self.secret, name=name,
                                       wait=wait, seq=seq, ack=ack, open=open_, permits=permits, shared=shared)
        if lock_delay is not None:
            req.lock_delay.FromNanoseconds(round(lock_delay * 1e9))
        return req

    def release_request(self, name: str) -> fence_pb2.ReleaseRequest:
        """A new numbered Release; it is re-sent unchanged on every retry."""
        seq = self.calls.begin()
        ack, open_ = self.calls.acks(seq)
        return fence_pb2.ReleaseRequest(request_id=new_request_id(), lease_secret=self.secret, name=name,
                                        seq=seq, ack=ack, open=open_)

    def send_acquire(self, req: fence_pb2.AcquireRequest, deadline: Optional[float]) -> fence_pb2.AcquireResponse:
        return self._t.retry(lambda stub, timeout: stub.Acquire(req, timeout=timeout), deadline)

    def send_release(self, req: fence_pb2.ReleaseRequest, deadline: Optional[float]) -> None:
        self._t.retry(lambda stub, timeout: stub.Release(req, timeout=timeout), deadline)

    def settle(self, call: Callable[[float], object]) -> Optional[FenceError]:
        """Re-sends call (the same request) until its outcome is known or the
        settle bound passes; returns the last error (None: it succeeded)."""
        bound = time.monotonic() + self.settle_for
        while True:
            try:
                call(min(time.monotonic() + SETTLE_ATTEMPT, bound))
                return None
            except FenceError as e:
                err = e
            if not outcome_unknown(err) or time.monotonic() >= bound or self.end_err() is not None:
                return err

    def settle_acquire(self, req: fence_pb2.AcquireRequest) -> None:
        """Settles an Acquire whose outcome is unknown, giving back a grant it
        made. The caller still holds the local claim on the name."""
        err = self.settle(lambda dl: self.send_acquire(req, dl))
        if not outcome_unknown(err):
            self.calls.answered(req.seq)
        if err is None:  # granted after all: nobody will use it
            self.give_back(req.name)
        elif outcome_unknown(err):
            self.abandon(f"acquire of {req.name!r}", err)

    def give_back(self, name: str) -> None:
        """Releases a grant no caller holds, settling the outcome."""
        req = self.release_request(name)
        err: Optional[FenceError] = None
        try:
            self.send_release(req, time.monotonic() + SETTLE_ATTEMPT)
        except FenceError as e:
            err = e
        if outcome_unknown(err):
            err = self.settle(lambda dl: self.send_release(req, dl))
        if not outcome_unknown(err):
            self.calls.answered(req.seq)
        if err is not None and refusal_code(err) not in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION):
            self.abandon(f"release of {name!r}", err)

    def abandon(self, what: str, err: BaseException) -> None:
        """Gives up the session: a call's outcome could not be settled (§4).
        Its leases end here at once, and it is revoked (if that fails too, the
        server expires it within the TTL, since nothing renews it)."""
        self.end(LeaseAbandonedError(f"{what} could not be settled ({err}); lease #{self.number} was given up "
                                     "so the server ends it"))
        threading.Thread(target=self.revoke, name=f"fence-revoke-{self.number}", daemon=True).start()

    def revoke(self) -> Optional[FenceError]:
        """Ends the lease on the server (it has ended here already); idempotent."""
        req = fence_pb2.RevokeRequest(request_id=new_request_id(), lease_secret=self.secret)
        try:
            self._t.retry(lambda stub, timeout: stub.Revoke(req, timeout=timeout), time.monotonic() + SETTLE_FOR)
        except FenceError as e:
            if refusal_code(e) != grpc.StatusCode.NOT_FOUND:
                return e
        return None
