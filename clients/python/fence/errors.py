"""The errors of the fence client, mirroring the Go client's (client/errors.go).

Every error is a FenceError. Catch the class that says what to do:

- LockedError: try_lock found the lock held (by whom: its attributes).
- ExpiredError: the lease can no longer be trusted; stop the work, another
  holder may exist. LostContactError (renewals kept failing until the local
  deadline) and LeaseAbandonedError (a call's outcome could not be settled,
  so the client gave the lease up) are kinds of it.
- RevokedError: an admin force-released this one lock; stop its work.
- ReleasedError, ClosedError: what Lease.err() says after release() or
  Client.close().
- IndeterminateError: a call's outcome is unknown (the server may have acted).
- UnreachableError: no member could be reached, or the address is not a
  fence gRPC port.
- InvalidError (also a ValueError): a bad argument, refused by this client
  or by the server (INVALID_ARGUMENT); nothing was changed.
- LockTimeoutError (also a TimeoutError): lock()'s timeout passed.
- CallError: any other refusal, with its gRPC code.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import grpc


class FenceError(Exception):
    """The base of every error this client raises or reports."""


class LockedError(FenceError):
    """try_lock found the lock held, or in lock-delay.

    holder_lease is the holder's public lease number (0 while in lock-delay),
    token the holder's token (or the last holder's, while delayed), local is
    True when another caller of this same Client holds it.
    """

    def __init__(self, name: str, holder_lease: int = 0, holder_owner: str = "", token: int = 0,
                 delayed: bool = False, local: bool = False) -> None:
        self.name, self.holder_lease, self.holder_owner = name, holder_lease, holder_owner
        self.token, self.delayed, self.local = token, delayed, local
        if local:
            msg = (f"lock {name!r} is held in this process by another caller of the same Client "
                   f"(lease #{holder_lease}, token {token})")
        elif delayed:
            msg = f"lock {name!r} is in lock-delay after its last holder's lease expired"
        else:
            msg = f"lock {name!r} is held by lease #{holder_lease} (owner {holder_owner!r}) with token {token}"
        super().__init__(msg)


class ExpiredError(FenceError):
    """The lease can no longer be trusted: its local deadline passed without a
    successful renewal, or the server reported it ended (expired, revoked)."""


class LostContactError(ExpiredError):
    """A kind of ExpiredError: renewals were failing until the deadline passed."""


class RevokedError(FenceError):
    """An admin force-released this lock (fence release --force). Only this
    Lease ends; the client's other locks live on. Stop the work."""


class ReleasedError(FenceError):
    """The holder released the lock (what Lease.err() returns afterwards)."""


class ClosedError(FenceError):
    """The Client was closed, which revokes its leases."""


class IndeterminateError(FenceError):
    """The outcome of a call is unknown: the server may have acted on it.

    code is the last gRPC status code seen, if any.
    """

    def __init__(self, msg: str, code: Optional[grpc.StatusCode] = None) -> None:
        super().__init__(msg)
        self.code = code


class LeaseAbandonedError(ExpiredError, IndeterminateError):
    """An Acquire or Release outcome stayed unknown past the settle bound, so
    the client gave up the whole lease (docs/protocol.md §4): its locks ended
    here, and it was revoked (or the server expires it within its TTL)."""

    def __init__(self, msg: str) -> None:
        IndeterminateError.__init__(self, msg)


class UnreachableError(FenceError):
    """No member could be reached (or it is not a fence gRPC port)."""


class InvalidError(FenceError, ValueError):
    """A bad argument, refused by this client or by the server; nothing was changed."""


class LockTimeoutError(FenceError, TimeoutError):
    """lock() gave up at its timeout (the lock stayed held by someone else)."""


class PermitsError(FenceError):
    """The lock has another permit count than the call asked for (a semaphore
    of another n, a lock or reader of a semaphore, a semaphore of a lock);
    nothing was changed. Every holder of a name must ask for the same count
    while the lock is held or waited for."""

    def __init__(self, name: str, permits: int, asked: int) -> None:
        self.name, self.permits, self.asked = name, permits, asked

        def what(n: int) -> str:
            return "a lock of one permit (a mutex or read-write lock)" if n == 1 else f"a semaphore of {n} permits"
        super().__init__(f"lock {name!r} is {what(permits)}, but this call asked for {what(asked)}")


class CallError(FenceError):
    """A refusal not covered by the classes above, with its gRPC code and
    the fence details it carried (NotLeader, LockHeld, StaleToken, RanRecently,
    PermitsMismatch messages)."""

    def __init__(self, msg: str, code: grpc.StatusCode, details: Sequence[Any] = ()) -> None:
        super().__init__(msg)
        self.code = code
        self.details = list(details)
