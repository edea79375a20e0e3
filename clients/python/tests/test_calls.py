"""The lock and release flows against scripted fake members: retries send
the same request (request_id, seq, ack, open) and follow NotLeader; an
unknown outcome is settled, a grant found late is given back, and an outcome
that stays unknown gives up the lease (docs/protocol.md §2, §4, §5)."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable, Iterator, Optional

import grpc
import pytest

import fence
from fence import _transport
from fence.v1 import fence_pb2
from test_rules import FakeRpcError, status_trailer

Handler = Callable[[str, Any, Optional[float]], Any]


def unavailable(leader: str = "") -> FakeRpcError:
    if leader:
        return FakeRpcError(grpc.StatusCode.UNAVAILABLE, "not the leader",
                            status_trailer(14, fence_pb2.NotLeader(leader_id="x", leader_addr=leader)))
    return FakeRpcError(grpc.StatusCode.UNAVAILABLE, "no leader")


class FakeCluster:
    """Members by address; each call is logged and answered by the scripted
    handler of its method (a list is used up one answer per call, its last
    entry repeated)."""

    def __init__(self) -> None:
        self.log: "queue.Queue[tuple[str, str, Any]]" = queue.Queue()
        self.calls: list[tuple[str, str, Any]] = []
        self.script: dict[str, list[Handler]] = {}
        self.mu = threading.Lock()

    def on(self, method: str, *handlers: Handler) -> None:
        self.script[method] = list(handlers)

    def handle(self, addr: str, method: str, req: Any, timeout: Optional[float]) -> Any:
        with self.mu:
            copy = type(req).FromString(req.SerializeToString())
            self.calls.append((addr, method, copy))
            hs = self.script[method]
            h = hs.pop(0) if len(hs) > 1 else hs[0]
        self.log.put((addr, method, copy))
        return h(addr, req, timeout)

    def sent(self, method: str) -> list[tuple[str, Any]]:
        with self.mu:
            return [(a, r) for a, m, r in self.calls if m == method]

    def wait_for(self, method: str, timeout: float = 5.0) -> tuple[str, Any]:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                a, m, r = self.log.get(timeout=0.1)
            except queue.Empty:
                continue
            if m == method:
                return a, r
        raise AssertionError(f"no {method} call within {timeout}s")


class SilentStream:
    """A KeepAlive that never answers (renewals are not the point here)."""

    def __init__(self) -> None:
        self.done = threading.Event()

    def __iter__(self) -> Iterator[Any]:
        self.done.wait(30)
        raise FakeRpcError(grpc.StatusCode.CANCELLED, "cancelled")

    def cancel(self) -> None:
        self.done.set()


class FakeStub:
    def __init__(self, cluster: FakeCluster, addr: str) -> None:
        self.c, self.addr = cluster, addr

    def __getattr__(self, method: str) -> Callable[..., Any]:
        def call(req: Any, timeout: Optional[float] = None, metadata: Any = None) -> Any:
            return self.c.handle(self.addr, method, req, timeout)
        return call

    def KeepAlive(self, reqs: Iterator[Any]) -> SilentStream:
        return SilentStream()


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> FakeCluster:
    c = FakeCluster()

    class Member:
        def __init__(self, addr: str, creds: object) -> None:
            self.addr = addr
            self.channel = self
            self.stub = FakeStub(c, addr)

        def close(self) -> None:
            pass
    monkeypatch.setattr(_transport, "Member", Member)
    c.on("CreateLease", lambda a, r, t: lease_resp(1))
    c.on("Revoke", lambda a, r, t: fence_pb2.RevokeResponse())
    c.on("Release", lambda a, r, t: fence_pb2.ReleaseResponse())
    return c


def lease_resp(number: int, ttl: int = 30) -> fence_pb2.CreateLeaseResponse:
    r = fence_pb2.CreateLeaseResponse(lease_secret=bytes([number]) * 16, lease_number=number)
    r.ttl.FromSeconds(ttl)
    return r


def granted(token: int) -> Handler:
    return lambda a, r, t: fence_pb2.AcquireResponse(name=r.name, token=token, lease_number=1)


def fail(err: BaseException) -> Handler:
    def h(a: str, r: Any, t: Optional[float]) -> Any:
        raise err
    return h


def only_on(addr: str, h: Handler) -> Handler:
    """h at addr; elsewhere UNAVAILABLE with a NotLeader naming addr."""
    def route(a: str, r: Any, t: Optional[float]) -> Any:
        if a != addr:
            raise unavailable(leader=addr)
        return h(a, r, t)
    return route


def client(cluster: FakeCluster, addrs: list[str], **kw: Any) -> fence.Client:
    return fence.Client(addrs, insecure=True, connect_timeout=None, **kw)


def test_retries_send_the_same_request_and_follow_not_leader(cluster: FakeCluster) -> None:
    cluster.on("CreateLease", only_on("m2:1", lambda a, r, t: lease_resp(1)))
    cluster.on("Acquire",
               only_on("m2:1", fail(unavailable())),   # m2 loses its leadership: outcome unknown
               only_on("m2:1", granted(7)))            # m1 names m2 again; m2 answers
    c = client(cluster, ["m1:1"])
    lease = c.lock("a", timeout=5)
    assert lease.token == 7
    creates = cluster.sent("CreateLease")
    assert [a for a, _ in creates] == ["m1:1", "m2:1"]  # followed NotLeader to a member it did not know
    assert creates[0][1] == creates[1][1]  # the same request_id on the retry
    acquires = cluster.sent("Acquire")
    assert [a for a, _ in acquires] == ["m2:1", "m1:1", "m2:1"]  # UNAVAILABLE without detail: next member
    first = acquires[0][1]
    assert len(first.request_id) == 16 and any(first.request_id)
    assert (first.seq, first.ack, list(first.open), first.name, first.wait) == (1, 1, [], "a", True)
    assert all(r == first for _, r in acquires)  # byte for byte the same request on every retry
    c.close()


def test_a_grant_that_won_the_race_with_the_timeout_is_given_back(cluster: FakeCluster) -> None:
    def too_late(a: str, r: Any, t: Optional[float]) -> Any:
        time.sleep(t or 0)
        raise FakeRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, "gave up waiting")
    cluster.on("Acquire", too_late, granted(9))  # the retry of the same request finds the grant
    c = client(cluster, ["m1:1"])
    start = time.monotonic()
    with pytest.raises(fence.LockTimeoutError):
        c.lock("a", timeout=0.3)
    assert time.monotonic() - start < 3
    acquires = [r for _, r in cluster.sent("Acquire")]
    assert len(acquires) == 2 and acquires[0] == acquires[1]
    (_, rel), = cluster.sent("Release")  # nobody knows of the grant: released at once
    assert (rel.name, rel.seq, rel.ack, list(rel.open)) == ("a", 2, 2, [])
    assert rel.lease_secret == acquires[0].lease_secret and rel.request_id != acquires[0].request_id
    assert not cluster.sent("Revoke")  # settled: the lease lives on
    c.close()


def test_an_acquire_that_stays_unknown_gives_up_the_lease(cluster: FakeCluster) -> None:
    cluster.on("Acquire", fail(unavailable()))
    c = client(cluster, ["m1:1"], settle_for=0.5)
    with pytest.raises(fence.UnreachableError):
        c.lock("a", timeout=0.3)
    _, rev = cluster.wait_for("Revoke")
    assert rev.lease_secret == bytes([1]) * 16
    n = len(cluster.sent("Acquire"))
    assert n > 3  # re-sent while settling, every attempt the same request
    assert len({r.SerializeToString() for _, r in cluster.sent("Acquire")}) == 1
    cluster.on("CreateLease", lambda a, r, t: lease_resp(2))
    cluster.on("Acquire", granted(11))
    lease = c.lock("a", timeout=2)  # a new lease: the given-up one is not reused
    assert lease.lease_number == 2 and len(cluster.sent("CreateLease")) == 2
    c.close()


def test_a_release_that_stays_unknown_gives_up_the_lease(cluster: FakeCluster) -> None:
    cluster.on("Acquire", granted(3))
    cluster.on("Release", fail(unavailable()))
    c = client(cluster, ["m1:1"], settle_for=0.5)
    a, b = c.lock("a", timeout=2), c.lock("b", timeout=2)
    with pytest.raises(fence.LeaseAbandonedError) as e:
        a.release(timeout=0.2)
    assert isinstance(e.value, fence.ExpiredError) and isinstance(e.value, fence.IndeterminateError)
    assert a.done.is_set() and b.done.is_set()  # every lock of the lease ends
    assert isinstance(b.err(), fence.LeaseAbandonedError)
    cluster.wait_for("Revoke")
    rels = [r for _, r in cluster.sent("Release")]
    assert len({r.SerializeToString() for r in rels}) == 1 and rels[0].seq == 3
    c.close()


def test_release_of_a_force_released_lock_is_revoked_not_abandoned(cluster: FakeCluster) -> None:
    cluster.on("Acquire", granted(3))
    cluster.on("Release", fail(FakeRpcError(grpc.StatusCode.FAILED_PRECONDITION, "not held")))
    c = client(cluster, ["m1:1"])
    a, b = c.lock("a", timeout=2), c.lock("b", timeout=2)
    with pytest.raises(fence.RevokedError):
        a.release()
    assert b.err() is None and not cluster.sent("Revoke")
    c.close()


def test_not_found_starts_a_new_lease(cluster: FakeCluster) -> None:
    numbers = iter([1, 2])
    cluster.on("CreateLease", lambda a, r, t: lease_resp(next(numbers)))
    cluster.on("Acquire", fail(FakeRpcError(grpc.StatusCode.NOT_FOUND, "lease not found")), granted(5))
    c = client(cluster, ["m1:1"])
    lease = c.lock("a", timeout=2)
    assert lease.lease_number == 2
    acquires = [r for _, r in cluster.sent("Acquire")]
    assert [r.lease_secret[0] for r in acquires] == [1, 2] and [r.seq for r in acquires] == [1, 1]
    c.close()


def test_ack_and_open_while_calls_wait(cluster: FakeCluster) -> None:
    go_on = threading.Event()

    def waits(a: str, r: Any, t: Optional[float]) -> Any:
        if r.name.startswith("slow"):
            go_on.wait(5)
        return fence_pb2.AcquireResponse(name=r.name, token=r.seq, lease_number=1)
    cluster.on("Acquire", waits)
    c = client(cluster, ["m1:1"])
    c.lock("warm", timeout=2)  # seq 1, answered
    cluster.wait_for("Acquire")
    threads = []
    for n in ("slow1", "slow2"):  # seq 2 and 3 wait in a queue
        threads.append(threading.Thread(target=c.lock, args=(n,), kwargs={"timeout": 5}))
        threads[-1].start()
        cluster.wait_for("Acquire")
    c.lock("x", timeout=2)       # seq 4: ack 2, 3 open
    c.lock("y", timeout=2)       # seq 5: ack 2, 3 open; 4 is answered, so acknowledged
    go_on.set()
    for t in threads:
        t.join(5)
    c.lock("z", timeout=2)       # seq 6: everything below answered
    got = {r.name: (r.seq, r.ack, list(r.open)) for _, r in cluster.sent("Acquire")}
    assert got == {"warm": (1, 1, []), "slow1": (2, 2, []), "slow2": (3, 2, []), "x": (4, 2, [3]),
                   "y": (5, 2, [3]), "z": (6, 6, [])}
    c.close()


def test_the_first_deadline_counts_from_create_lease_s_first_attempt(cluster: FakeCluster) -> None:
    def slow(a: str, r: Any, t: Optional[float]) -> Any:
        time.sleep(0.3)
        return lease_resp(1, ttl=3)  # the TTL the server answers counts
    cluster.on("CreateLease", fail(unavailable()), slow)  # a retry, then a slow answer
    cluster.on("Acquire", granted(1))
    c = client(cluster, ["m1:1"], ttl=3.0)  # margin 0.3 s
    before = time.clock_gettime(time.CLOCK_BOOTTIME)
    lease = c.lock("a", timeout=5)
    after = time.clock_gettime(time.CLOCK_BOOTTIME)
    assert after - before >= 0.3
    assert before < lease.deadline() <= before + 2.7 + 0.02  # not from the answer: ≥ 0.3 s later
    c.close()
