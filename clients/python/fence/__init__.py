"""fence: a Python client of the fence lock service.

    import fence

    with fence.lock("jobs/nightly") as lease:   # $FENCE_SERVER, the dev certificates
        run_the_job(fencing_token=lease.token)

or, holding a Client for many locks:

    with fence.Client(["127.0.0.1:7300"], insecure=True) as client:
        with client.lock("jobs/nightly", timeout=30) as lease:
            write(data, fencing_token=lease.token)   # pass the token to storage
            if lease.err():                           # the lease ended: stop
                ...

It follows docs/protocol.md (the client contract) and mirrors the Go client:
one server lease per TTL shared by the client's locks, renewed every ttl/3 on
one KeepAlive stream; a local deadline counted from the send time, on
CLOCK_BOOTTIME; retries of the same request; leader following. The generated
gRPC code is in fence.v1.
"""

from .client import Client, GrantInfo, Lease, LockInfo, Member, RWLock, Semaphore, lock
from .errors import (CallError, ClosedError, ExpiredError, FenceError, IndeterminateError, InvalidError,
                     LeaseAbandonedError, LockedError, LockTimeoutError, LostContactError, ReleasedError,
                     PermitsError, RevokedError, UnreachableError)

__all__ = [
    "Client", "Lease", "LockInfo", "GrantInfo", "Member", "lock",
    "FenceError", "LockedError", "ExpiredError", "LostContactError", "LeaseAbandonedError", "RevokedError",
    "ReleasedError", "ClosedError", "IndeterminateError", "UnreachableError", "InvalidError",
    "LockTimeoutError", "CallError", "PermitsError", "Semaphore", "RWLock",
]
