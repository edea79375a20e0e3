"""Client and Lease: the public face of the fence client (the Go client's
client.go and lease.go). See docs/protocol.md for the rules it follows and
README.md beside this package for how each maps to the code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import threading
import time
from types import TracebackType
from typing import Any, Callable, Iterator, Optional, Sequence, TypeVar, Union

import grpc

from . import _rules
from ._rules import BootClock, Clock
from ._session import NextLane, Session, new_request_id, refusal_code, seconds
from ._status import Detail
from ._transport import Transport, outcome_unknown
from .errors import (CallError, ClosedError, ExpiredError, FenceError, IndeterminateError, InvalidError,
                     LeaseAbandonedError, LockedError, LockTimeoutError, PermitsError, ReleasedError,
                     RevokedError, UnreachableError)
from .v1 import fence_pb2, fence_pb2_grpc

T = TypeVar("T")
# (ttl, margin, lane): locks share a lease when ttl and margin agree; a lease
# holds one grant per name, so callers holding permits of one semaphore (or
# reading one read-write lock) at once use lanes 0, 1, 2 … (a mutex's callers take
# turns in one lane; a writer behind a local reader or permit moves on: NextLane).
_SessionKey = tuple[float, float, int]
_MAX_PERMITS = 1 << 16

ENV_CA, ENV_CERT, ENV_KEY = "FENCE_CA", "FENCE_CERT", "FENCE_KEY"


class Lease:
    """A granted lock: the right to act as its only holder until `done` is set.

    A Lease can end at any moment without its holder doing anything (a pause,
    a network cut), so: pass `token` to every write and let the storage refuse
    a stale one; stop when `done` is set; check `err()` before anything
    irreversible. Use it as a context manager to release it at the end.
    """

    def __init__(self, session: Session, name: str, token: int, signed_token: str,
                 unclaim: Callable[[], None]) -> None:
        self._s = session
        self.name = name
        self.token = token  #: the fencing token: larger than every earlier grant's of this lock
        self.signed_token = signed_token  #: the server's signed statement of the grant ("" without a token key)
        self.lease_number: int = session.number  #: the public number of the server lease holding it
        self.slot = 0  #: a semaphore permit's slot, 0…n−1 (the lowest free when granted); 0 otherwise
        self.shared = False  #: a reader's grant of a read-write lock
        self.done = threading.Event()  #: set when the lease can no longer be trusted (or was released)
        self._unclaim = unclaim
        self._mu = threading.Lock()
        self._released = False
        self._revoked: Optional[RevokedError] = None
        self._finished = False
        session.track(self)
        if session.end_err() is not None:  # it ended before track: end() did not see this grant
            self._finish()

    def _finish(self) -> None:
        with self._mu:
            if self._finished:
                return
            self._finished = True
        self._s.untrack(self)
        self.done.set()
        self._unclaim()

    def _revoke(self, err: FenceError) -> None:
        """Ends this grant alone (an admin force-released it)."""
        with self._mu:
            if self._revoked is None and not self._released:
                self._revoked = err if isinstance(err, RevokedError) else RevokedError(str(err))
        self._finish()

    def err(self) -> Optional[FenceError]:
        """None while the lease is valid, else why it ended: ExpiredError (or a
        kind of it), RevokedError, ReleasedError or ClosedError. It reads the
        clock itself, so after a pause it reports the expiry at once."""
        e = self._s.end_err()
        if e is not None:
            self._finish()
            return e
        with self._mu:
            if self._revoked is not None:
                return self._revoked
            if self._released:
                return ReleasedError(f"lock {self.name!r} was released")
        return None

    def jeopardy(self) -> Optional[str]:
        """The last renewal error while renewals fail but the deadline has not
        passed (the lease is still valid: finish soon, be ready to stop), else None."""
        if self.err() is not None:
            return None
        return self._s.jeopardy()

    def deadline(self) -> float:
        """The local deadline, in seconds on the client's clock
        (time.clock_gettime(time.CLOCK_BOOTTIME) by default). It moves forward
        with each renewal. For display; decide with err() or done."""
        return self._s.deadline()

    def time_left(self) -> float:
        """Seconds until the local deadline (0 once the lease has ended)."""
        return 0.0 if self.err() is not None else self._s.time_left()

    def release(self, timeout: Optional[float] = 5.0) -> None:
        """Gives the lock up; the next waiter gets it at once. Returns if it was
        released (also by an earlier release); raises the lease's error if it
        had already ended (the lock was lost while held: the work was only safe
        if fenced).

        If the answer does not come within timeout, the same request is
        re-sent for a few more seconds; if the outcome is still unknown, the
        whole lease is given up so the server ends it, and LeaseAbandonedError
        is raised. Either way the lease is over when release returns."""
        with self._mu:
            if self._released:
                return
        err = self.err()
        if err is not None:
            raise err
        s = self._s
        req = s.release_request(self.name)
        deadline = None if timeout is None else time.monotonic() + timeout
        e: Optional[FenceError] = None
        try:
            s.send_release(req, deadline)
        except FenceError as x:
            e = x
        if outcome_unknown(e):
            e = s.settle(lambda dl: s.send_release(req, dl))  # the same request, fresh attempts
        if not outcome_unknown(e):
            s.calls.answered(req.seq)
        code = refusal_code(e)
        if code == grpc.StatusCode.NOT_FOUND:  # the whole lease ended (expired, or revoked)
            s.end(ExpiredError(f"the server no longer had lease #{s.number}"))
            raise self.err() or ExpiredError(f"the server no longer had lease #{s.number}")
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED:  # refused, not executed: still held
            raise CallError(f"release {self.name!r}: too many calls of lease #{s.number} in flight; the lock is "
                            "still held, release it again later", code)
        if code == grpc.StatusCode.FAILED_PRECONDITION:  # this grant alone ended: force-released
            self._revoke(RevokedError(f"lock {self.name!r} (token {self.token}) was no longer held by lease "
                                      f"#{s.number} when released"))
            raise self.err() or RevokedError(self.name)
        if e is not None:  # not confirmed: the lock may still be held; give up the lease
            s.abandon(f"release of {self.name!r}", e)
            self._finish()
            raise self.err() or LeaseAbandonedError(str(e))
        with self._mu:
            self._released = True
        self._finish()

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        if exc is None:
            self.release()  # raises if the lease was lost meanwhile: the caller must know
            return
        try:
            self.release()
        except FenceError:
            pass  # the body's exception is the one to see

    def __repr__(self) -> str:
        return f"<fence.Lease {self.name!r} token={self.token} lease=#{self.lease_number}>"


@dataclasses.dataclass(frozen=True)
class GrantInfo:
    """One grant of a lock: a permit (slot) of a semaphore, a reader's or a writer's."""
    holder_lease: int  #: 0 while in lock-delay
    holder_owner: str
    token: int
    slot: int
    shared: bool
    delayed: bool
    ttl_left: float


@dataclasses.dataclass(frozen=True)
class LockInfo:
    """A lock as the server sees it (holder_lease 0: nobody holds it). The
    holder fields describe its first grant (a mutex's one grant); grants
    lists every grant of a semaphore or of readers."""
    name: str
    holder_lease: int
    holder_owner: str
    token: int
    ttl_left: float
    waiters: int
    delayed: bool
    lock_delay: float
    permits: int = 1  #: 1 for a mutex or a read-write lock, n for a semaphore
    grants: tuple[GrantInfo, ...] = ()

    @property
    def held(self) -> bool:
        return self.holder_lease != 0


@dataclasses.dataclass(frozen=True)
class Member:
    """One member of the raft group, as the leader sees it."""
    id: str
    raft_addr: str
    grpc_addr: str
    leader: bool
    voter: bool


class Client:
    """Talks to a fence server or cluster; safe to share between threads.

    servers: one host:port per member (any subset will do while one of them
    leads; more are learned from the members). TLS: ca, cert and key are PEM
    files (default: $FENCE_CA, $FENCE_CERT, $FENCE_KEY); insecure=True speaks
    plaintext to a server started with --insecure. token: a bearer token
    identifying the client under a server's policy (sent only over TLS);
    admin_token: sent with admin calls (force_release).

    ttl (seconds, default 30) and safety_margin (default ttl/10, never less
    than ttl × 1000 ppm + 10 ms) are the defaults of lock(); locks with the
    same TTL and margin share one server lease, renewed every ttl/3.
    connect_timeout: how long the constructor waits for a member to connect
    (None: not at all). clock is for tests: where lease times are read
    (default CLOCK_BOOTTIME).
    """

    def __init__(self, servers: Union[Sequence[str], str], *, insecure: bool = False, ca: Optional[str] = None,
                 cert: Optional[str] = None, key: Optional[str] = None, token: Optional[str] = None,
                 admin_token: Optional[str] = None, ttl: float = 30.0, safety_margin: Optional[float] = None,
                 lock_delay: Optional[float] = None, owner: Optional[str] = None,
                 connect_timeout: Optional[float] = 10.0, settle_for: float = 5.0,
                 clock: Optional[Clock] = None) -> None:
        addrs = [a.strip() for a in servers.split(",")] if isinstance(servers, str) else list(servers)
        if not addrs or not all(isinstance(a, str) and a for a in addrs):
            raise InvalidError("no server address given (for example 127.0.0.1:7300)")
        self._ttl = _rules.check_ttl(ttl)
        self._margin = safety_margin
        _rules.safety_margin(self._ttl, safety_margin)
        self._lock_delay = _check_lock_delay(lock_delay)
        self._owner = _rules.check_owner(f"{socket.gethostname()}/{os.getpid()}" if owner is None else owner)
        self._admin_token = admin_token
        self._settle_for = settle_for
        self._clock: Clock = clock or BootClock()
        self._t = Transport(addrs, _credentials(insecure, ca, cert, key, token))
        self._mu = threading.Condition()
        self._sessions: dict[_SessionKey, Session] = {}
        self._creating: set[_SessionKey] = set()
        self._closed = False
        if connect_timeout is not None:
            try:
                self._t.wait_ready(connect_timeout)
            except BaseException:
                self._t.close()
                raise

    # --- locks ---

    def lock(self, name: str, *, wait: bool = True, timeout: Optional[float] = None,
             ttl: Optional[float] = None, safety_margin: Optional[float] = None,
             lock_delay: Optional[float] = None, _permits: int = 0, _shared: bool = False) -> Lease:
        """Takes the lock, waiting for it in FIFO order with other waiters
        (wait=False: fail at once with LockedError if it is held), for at most
        timeout seconds (None: no bound; then LockTimeoutError, or
        UnreachableError if no member could serve the call). ttl,
        safety_margin and lock_delay override the client's defaults."""
        _rules.check_name("lock name", name)
        t = self._ttl if ttl is None else _rules.check_ttl(ttl)
        key = (t, _rules.safety_margin(t, self._margin if safety_margin is None else safety_margin), 0)
        delay = self._lock_delay if lock_delay is None else _check_lock_delay(lock_delay)
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0):
            raise InvalidError(f"timeout {timeout!r} must be a non-negative number of seconds, or None")
        deadline = None if timeout is None else time.monotonic() + timeout
        return self._acquire(name, wait, deadline, key, delay, _permits, _shared)

    def try_lock(self, name: str, *, timeout: Optional[float] = None, ttl: Optional[float] = None,
                 safety_margin: Optional[float] = None, lock_delay: Optional[float] = None) -> Lease:
        """Takes the lock if it is free; raises LockedError (who holds it) if not.
        That includes a name held by another caller of this Client (local=True)."""
        return self.lock(name, wait=False, timeout=timeout, ttl=ttl, safety_margin=safety_margin,
                         lock_delay=lock_delay)

    def semaphore(self, name: str, n: int) -> Semaphore:
        """A handle on the semaphore name of n permits (see Semaphore)."""
        return Semaphore(self, name, n)

    def rwlock(self, name: str) -> RWLock:
        """A handle on the read-write lock name (see RWLock)."""
        return RWLock(self, name)

    def _acquire(self, name: str, wait: bool, deadline: Optional[float], key: _SessionKey,
                 lock_delay: Optional[float], permits: int = 0, shared: bool = False) -> Lease:
        multi = permits > 1 or shared
        while True:
            s = self._session(key, deadline)
            try:
                unclaim, granted = s.claim(name, wait, deadline, multi)
            except ExpiredError:
                continue  # the session ended while we waited locally: start over
            except NextLane:
                # this lease holds a permit (a read) of name, or a writer asks
                # beside a local reader: the next lane may ask
                key = (key[0], key[1], key[2] + 1)
                continue
            req = s.acquire_request(name, wait, lock_delay, permits, shared)
            err: Optional[FenceError] = None
            try:
                # Retries send the same request (id and numbers): a grant whose
                # answer was lost comes back as the same grant, never a second.
                resp = s.send_acquire(req, deadline)
            except FenceError as e:
                err = e
            if not outcome_unknown(err):
                s.calls.answered(req.seq)
            if err is None:
                granted(resp.token)
                lease = Lease(s, name, resp.token, resp.signed_token, unclaim)
                lease.slot, lease.shared = resp.slot, resp.shared
                return lease
            if outcome_unknown(err):
                s.settle_acquire(req)  # before unclaim: no other local caller can hold the name yet
            unclaim()
            code = refusal_code(err)
            timed_out = deadline is not None and time.monotonic() >= deadline
            if code == grpc.StatusCode.NOT_FOUND:  # the server ended our lease: end it here too, start over
                s.end(ExpiredError(f"the server ended lease #{s.number}"))
                continue
            if code == grpc.StatusCode.ABORTED and _lock_held(err):
                raise _locked_error(name, err)
            for d in getattr(err, "details", ()):
                if isinstance(d, fence_pb2.PermitsMismatch):
                    raise PermitsError(name, d.permits, d.asked) from err
            if code == grpc.StatusCode.ABORTED and not timed_out:
                continue  # the server ended this wait (it stopped, say): wait again with a new call
            if timed_out and (code == grpc.StatusCode.ABORTED or isinstance(err, IndeterminateError)):
                if isinstance(err, IndeterminateError) and err.code == grpc.StatusCode.UNAVAILABLE:
                    raise UnreachableError(f"lock {name!r}: no member could serve the call in time ({err})")
                raise LockTimeoutError(f"lock {name!r}: not granted within the timeout")
            raise err

    def _session(self, key: _SessionKey, deadline: Optional[float]) -> Session:
        """The live session for key, created if needed (one creation at a time per key)."""
        while True:
            with self._mu:
                if self._closed:
                    raise ClosedError("client closed")
                s = self._sessions.get(key)
                if s is None and key in self._creating:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise LockTimeoutError("timed out waiting for a lease to be created")
                    self._mu.wait(0.05 if left is None else min(left, 0.05))
                    continue
                if s is None:
                    self._creating.add(key)
            if s is not None:
                if s.end_err() is None:
                    return s
                self._forget(s)
                continue
            try:
                s = self._new_session(key, deadline)
            finally:
                with self._mu:
                    self._creating.discard(key)
                    self._mu.notify_all()
            with self._mu:
                closed = self._closed
                if not closed:
                    self._sessions[key] = s
            if closed:
                s.end(ClosedError("client closed"))
                s.revoke()
                raise ClosedError("client closed")
            return s

    def _new_session(self, key: _SessionKey, deadline: Optional[float]) -> Session:
        ttl, margin, lane = key
        req = fence_pb2.CreateLeaseRequest(request_id=new_request_id(), owner=self._owner)
        req.ttl.FromNanoseconds(round(ttl * 1e9))
        sent = self._clock.now()  # §6.2: the deadline counts from the FIRST attempt's send time
        try:
            resp = self._t.retry(lambda stub, timeout: stub.CreateLease(req, timeout=timeout), deadline)
        except IndeterminateError as e:
            if e.code == grpc.StatusCode.UNAVAILABLE:
                raise UnreachableError(f"create a lease: no member could serve the call in time ({e})") from e
            raise LockTimeoutError(f"create a lease: no answer in time ({e})") from e
        s = Session(self._t, self._clock, ttl, margin, self._owner, resp, sent, self._forget, self._settle_for)
        s.lane = lane
        return s

    def _forget(self, s: Session) -> None:
        """Drops an ended session so the next lock makes a fresh one."""
        with self._mu:
            key = (s.ttl, s.margin, s.lane)
            if self._sessions.get(key) is s:
                del self._sessions[key]

    # --- reads and admin calls ---

    def status(self, name: str, *, timeout: float = 10.0) -> LockInfo:
        """One lock's state as the leader sees it (a free lock has no holder)."""
        _rules.check_name("lock name", name)
        r = self._call(lambda stub, t: stub.GetLock(fence_pb2.GetLockRequest(name=name), timeout=t), timeout)
        return _lock_info(r.lock)

    def force_release(self, name: str, reason: str = "", *, timeout: float = 10.0) -> LockInfo:
        """For operators: ends the current grant of name (the holder's lease and
        its other locks live on; its Lease ends with RevokedError at its next
        renewal) and returns the grant ended. The grant is named by its token,
        read first, so a retry never ends a later holder's grant."""
        info = self.status(name, timeout=timeout)
        if not info.held:
            raise CallError(f"lock {name!r} is not held; nothing to release", grpc.StatusCode.FAILED_PRECONDITION)
        req = fence_pb2.ForceReleaseRequest(request_id=new_request_id(), name=name, token=info.token, reason=reason)
        md = (("authorization", "Bearer " + self._admin_token),) if self._admin_token else None
        r = self._call(lambda stub, t: stub.ForceRelease(req, timeout=t, metadata=md), timeout)
        return dataclasses.replace(info, holder_lease=r.revoked_lease_number, holder_owner=r.revoked_owner)

    def members(self, *, timeout: float = 10.0) -> list[Member]:
        """The raft group as the leader knows it."""
        r = self._call(lambda stub, t: stub.Members(fence_pb2.MembersRequest(), timeout=t), timeout)
        return [Member(m.id, m.raft_addr, m.grpc_addr, m.role == fence_pb2.ROLE_LEADER,
                       m.suffrage == fence_pb2.SUFFRAGE_VOTER) for m in r.members]

    def _call(self, call: Callable[[fence_pb2_grpc.FenceServiceStub, Optional[float]], T], timeout: float) -> T:
        try:
            return self._t.retry(call, time.monotonic() + timeout)
        except IndeterminateError as e:
            if e.code == grpc.StatusCode.UNAVAILABLE:
                raise UnreachableError(f"no member could serve the call in time ({e})") from e
            raise

    # --- the end ---

    def close(self) -> None:
        """Revokes every lease of the client (their Leases end with
        ClosedError) and closes the connections. A lease whose Revoke fails
        expires on the server after its TTL, since nothing renews it."""
        with self._mu:
            self._closed = True
            sessions = list(self._sessions.values())
        for s in sessions:
            s.end(ClosedError(f"client closed; lease #{s.number} revoked"))
            s.revoke()
        self._t.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_lock_delay(d: Optional[float]) -> Optional[float]:
    if d is None:
        return None
    if isinstance(d, bool) or not isinstance(d, (int, float)) or not 0 <= d <= 600:
        raise InvalidError(f"lock delay {d!r} must be between 0 and 600 seconds")
    return float(d)


def _credentials(insecure: bool, ca: Optional[str], cert: Optional[str], key: Optional[str],
                 token: Optional[str]) -> Optional[grpc.ChannelCredentials]:
    if insecure:
        if token:
            raise InvalidError("a bearer token is sent only over TLS; drop insecure=True and give certificates")
        return None
    if ca is None and cert is None and key is None:
        ca, cert, key = os.environ.get(ENV_CA), os.environ.get(ENV_CERT), os.environ.get(ENV_KEY)
    if not ca or bool(cert) != bool(key):
        raise InvalidError(f"no TLS configured: pass ca= (and cert= and key=: a dev server's are in <data-dir>/tls), "
                           f"set {ENV_CA}, {ENV_CERT} and {ENV_KEY}, or pass insecure=True for a server started "
                           "with --insecure")

    def read(path: Optional[str]) -> Optional[bytes]:
        if not path:
            return None
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as e:
            raise InvalidError(f"TLS file {path}: {e.strerror}") from e
    creds = grpc.ssl_channel_credentials(root_certificates=read(ca), private_key=read(key),
                                         certificate_chain=read(cert))
    if token:
        creds = grpc.composite_channel_credentials(creds, grpc.access_token_call_credentials(token))
    return creds


class Semaphore:
    """A lock of n permits: up to n holders at once, each grant with its own
    token and a slot (Lease.slot, 0…n−1, the lowest free), waiters served in
    FIFO order. Every holder of a name must use the same n while the lock is
    held or waited for; otherwise PermitsError (both counts). An idle lock is
    forgotten, so n may change between uses. Callers of one Client holding
    permits at once each use a lease of their own. A handle with no state."""

    def __init__(self, client: Client, name: str, n: int) -> None:
        self.client, self.name, self.n = client, name, n

    def acquire(self, *, wait: bool = True, timeout: Optional[float] = None, ttl: Optional[float] = None,
                safety_margin: Optional[float] = None, lock_delay: Optional[float] = None) -> Lease:
        """Takes a permit, as Client.lock takes a lock; Lease.slot is its slot."""
        if isinstance(self.n, bool) or not isinstance(self.n, int) or not 1 <= self.n <= _MAX_PERMITS:
            raise InvalidError(f"semaphore {self.name!r}: {self.n!r} permits is outside 1…{_MAX_PERMITS}")
        return self.client.lock(self.name, wait=wait, timeout=timeout, ttl=ttl, safety_margin=safety_margin,
                                lock_delay=lock_delay, _permits=self.n if self.n > 1 else 0)

    def try_acquire(self, **kw: Any) -> Lease:
        """Takes a permit if one is free and nobody waits; LockedError if not."""
        return self.acquire(wait=False, **kw)


class RWLock:
    """A read-write lock: readers (rlock) hold it together, a writer (lock)
    alone, in FIFO order: a reader that comes while a writer waits queues
    behind it, so writers are never starved. Every grant has its own token, a
    writer's above every earlier reader's, so storage that checks
    fence <= token refuses a reader's write after a writer's. A writer's
    grant is Client.lock's of the name. A handle with no state."""

    def __init__(self, client: Client, name: str) -> None:
        self.client, self.name = client, name

    def rlock(self, *, wait: bool = True, **kw: Any) -> Lease:
        """Takes a reader's grant (Lease.shared is True)."""
        return self.client.lock(self.name, wait=wait, _shared=True, **kw)

    def try_rlock(self, **kw: Any) -> Lease:
        """Takes a reader's grant if no writer holds or waits; LockedError if not."""
        return self.rlock(wait=False, **kw)

    def lock(self, *, wait: bool = True, **kw: Any) -> Lease:
        """Takes the writer's grant."""
        return self.client.lock(self.name, wait=wait, **kw)

    def try_lock(self, **kw: Any) -> Lease:
        """Takes the writer's grant if nobody holds or waits; LockedError if not."""
        return self.lock(wait=False, **kw)


def _lock_held(err: FenceError) -> Optional[fence_pb2.LockHeld]:
    for d in getattr(err, "details", ()):
        if isinstance(d, fence_pb2.LockHeld):
            return d
    return None


def _locked_error(name: str, err: FenceError) -> LockedError:
    h = _lock_held(err)
    if h is None:
        return LockedError(name)
    return LockedError(name, h.holder_lease_number, h.holder_owner, h.token, h.delayed)


def _lock_info(i: fence_pb2.LockInfo) -> LockInfo:
    grants = tuple(GrantInfo(g.lease_number, g.owner, g.token, g.slot, g.shared, g.delayed, seconds(g.ttl_left))
                   for g in i.grants)
    return LockInfo(i.name, i.holder_lease_number, i.holder_owner, i.token, seconds(i.ttl_left), i.waiters,
                    i.delayed, seconds(i.lock_delay), max(i.permits, 1), grants)



@contextlib.contextmanager
def lock(name: str, *, servers: Union[Sequence[str], str, None] = None, wait: bool = True,
         timeout: Optional[float] = None, **client_options: Any) -> Iterator[Lease]:
    """The one-line form: ``with fence.lock("jobs/nightly") as lease:``.

    Dials servers (default: $FENCE_SERVER, comma-separated, else
    127.0.0.1:7300) as the fence CLI does: with the certificates of
    $FENCE_CA, $FENCE_CERT and $FENCE_KEY, else the dev setup's in
    ./fence-data/tls when they exist; client_options go to Client (they
    override those). Takes the lock (Client.lock's wait and timeout), and on
    leaving the block releases it and closes the client, which revokes its
    lease. Inside, check lease.err() before each step that must not outlive
    the lock, and pass lease.token to the storage you write."""
    if servers is None:
        servers = os.environ.get("FENCE_SERVER") or "127.0.0.1:7300"
    opts: dict[str, Any] = {}
    dev = os.path.join("fence-data", "tls")
    for opt, env, dev_file in (("ca", "FENCE_CA", "ca.crt"), ("cert", "FENCE_CERT", "client.crt"), ("key", "FENCE_KEY", "client.key")):
        path = os.environ.get(env) or os.path.join(dev, dev_file)
        if os.path.exists(path):
            opts[opt] = path
    opts.update(client_options)
    with Client(servers, **opts) as client:
        with client.lock(name, wait=wait, timeout=timeout) as lease:
            yield lease
