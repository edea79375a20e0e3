"""The client against a real single-node fence server (started by conftest)."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import grpc
import pytest

import fence
from conftest import Server, free_port, until
from fence._session import new_request_id
from fence.v1 import fence_pb2, fence_pb2_grpc

Make = Callable[..., fence.Client]


def name() -> str:
    return "py/" + uuid.uuid4().hex[:12]


def test_lock_and_release(server: Server, clients: Make) -> None:
    c = clients([server.grpc], owner="py-holder")
    n = name()
    lease = c.lock(n, timeout=10)
    assert lease.token > 0 and lease.lease_number > 0 and lease.name == n
    assert lease.err() is None and not lease.done.is_set()
    info = c.status(n)
    assert (info.holder_lease, info.holder_owner, info.token) == (lease.lease_number, "py-holder", lease.token)
    lease.release()
    assert lease.done.is_set() and isinstance(lease.err(), fence.ReleasedError)
    assert not c.status(n).held
    lease.release()  # a second release is a no-op


def test_the_one_line_form(server: Server, clients: Make, monkeypatch: pytest.MonkeyPatch) -> None:
    """with fence.lock(name) as lease: dials $FENCE_SERVER, holds the lock in
    the block, and releases it (and revokes the lease) on leaving."""
    monkeypatch.setenv("FENCE_SERVER", server.grpc)
    watcher = clients([server.grpc])
    n = name()
    with fence.lock(n, insecure=True, owner="one-liner", timeout=10) as lease:
        assert lease.err() is None and lease.token > 0
        info = watcher.status(n)
        assert (info.holder_lease, info.holder_owner, info.token) == (lease.lease_number, "one-liner", lease.token)
    assert lease.done.is_set() and lease.err() is not None
    assert not watcher.status(n).held
    with pytest.raises(fence.InvalidError):
        with fence.lock("", insecure=True):
            pass


def test_try_lock_on_a_held_lock_names_the_holder(server: Server, clients: Make) -> None:
    a, b = clients([server.grpc], owner="holder-a"), clients([server.grpc], owner="holder-b")
    n = name()
    la = a.lock(n, timeout=10)
    with pytest.raises(fence.LockedError) as e:
        b.try_lock(n, timeout=10)
    assert (e.value.holder_lease, e.value.holder_owner, e.value.token) == (la.lease_number, "holder-a", la.token)
    assert not e.value.local and e.value.name == n
    assert str(la.lease_number) in str(e.value)
    with pytest.raises(fence.LockedError) as e2:  # another caller of the same client: local, no wait
        a.try_lock(n, timeout=10)
    assert e2.value.local and e2.value.token == la.token
    la.release()
    b.try_lock(n, timeout=10).release()


def test_fifo_waiters_get_increasing_tokens(server: Server, clients: Make) -> None:
    n = name()
    holder = clients([server.grpc]).lock(n, timeout=10)
    got: list[tuple[int, fence.Lease]] = []
    mu = threading.Lock()
    threads = []
    for i in range(3):
        c = clients([server.grpc])

        def wait(i: int = i, c: fence.Client = c) -> None:
            lease = c.lock(n, timeout=20)
            with mu:
                got.append((i, lease))
            time.sleep(0.1)
            lease.release()
        t = threading.Thread(target=wait, daemon=True)
        t.start()
        threads.append(t)
        until(f"waiter {i} queued", lambda i=i: holder_waiters(server, n) == i + 1)  # type: ignore[misc]
    holder.release()
    for t in threads:
        t.join(timeout=20)
    assert [i for i, _ in got] == [0, 1, 2]  # FIFO
    tokens = [holder.token] + [lease.token for _, lease in got]
    assert tokens == sorted(tokens) and len(set(tokens)) == 4


def holder_waiters(server: Server, n: str) -> int:
    with grpc.insecure_channel(server.grpc) as ch:
        r = fence_pb2_grpc.FenceServiceStub(ch).GetLock(fence_pb2.GetLockRequest(name=n), timeout=5)
        return int(r.lock.waiters)


def test_context_manager_releases(server: Server, clients: Make) -> None:
    c = clients([server.grpc])
    n = name()
    with c.lock(n, timeout=10) as lease:
        assert c.status(n).holder_lease == lease.lease_number
    assert not c.status(n).held and isinstance(lease.err(), fence.ReleasedError)
    with pytest.raises(RuntimeError, match="boom"):
        with c.lock(n, timeout=10):
            raise RuntimeError("boom")
    assert not c.status(n).held


def test_locks_of_one_ttl_share_a_lease(server: Server, clients: Make) -> None:
    c = clients([server.grpc], ttl=5)
    a, b = c.lock(name(), timeout=10), c.lock(name(), timeout=10)
    other = c.lock(name(), timeout=10, ttl=6)
    assert a.lease_number == b.lease_number != other.lease_number


def test_renewal_keeps_the_lease_past_several_ttls(server: Server, clients: Make) -> None:
    c = clients([server.grpc], ttl=1.0)  # the server's shortest TTL: renewed every 333 ms
    n = name()
    lease = c.lock(n, timeout=10)
    first = lease.deadline()
    end = time.monotonic() + 4.0  # four TTLs
    while time.monotonic() < end:
        assert lease.err() is None, lease.err()
        assert 0 < lease.time_left() <= 0.9
        time.sleep(0.05)
    assert lease.deadline() > first + 3
    info = c.status(n)
    assert info.holder_lease == lease.lease_number and 0 < info.ttl_left <= 1.0
    lease.release()


def test_lock_timeout_leaves_no_grant_behind(server: Server, clients: Make) -> None:
    a, b = clients([server.grpc]), clients([server.grpc])
    n = name()
    la = a.lock(n, timeout=10)
    start = time.monotonic()
    with pytest.raises(fence.LockTimeoutError):
        b.lock(n, timeout=1.0)
    assert 1.0 <= time.monotonic() - start < 8.0
    assert holder_waiters(server, n) == 0  # it left the queue
    la.release()
    assert not a.status(n).held  # nobody got it behind our back
    b.lock(n, timeout=5).release()  # and b's lease still works


def test_force_release_ends_that_lock_only(server: Server, clients: Make) -> None:
    c = clients([server.grpc], ttl=1.5)
    admin = clients([server.grpc])
    n1, n2 = name(), name()
    l1, l2 = c.lock(n1, timeout=10), c.lock(n2, timeout=10)
    revoked = admin.force_release(n1, "test")
    assert revoked.holder_lease == l1.lease_number and revoked.token == l1.token
    assert l1.done.wait(3.0)  # at the next renewal (every 0.5 s)
    assert isinstance(l1.err(), fence.RevokedError), l1.err()
    assert l2.err() is None and not l2.done.is_set()  # the lease and its other lock live on
    with pytest.raises(fence.RevokedError):
        l1.release()
    l2.release()


def test_force_release_with_the_cli(server: Server, clients: Make) -> None:
    c = clients([server.grpc], ttl=1.5)
    n = name()
    lease = c.lock(n, timeout=10)
    out = server.cli("release", "--force", n, "--reason", "python test")
    assert f"token {lease.token}" in out
    assert lease.done.wait(3.0)
    assert isinstance(lease.err(), fence.RevokedError)


def test_server_side_revoke_ends_the_lease(server: Server, clients: Make) -> None:
    """The lease is revoked behind the client's back: its next renewal answers
    ok=false, and every lock of the lease ends (ExpiredError)."""
    c = clients([server.grpc], ttl=1.5)
    l1, l2 = c.lock(name(), timeout=10), c.lock(name(), timeout=10)
    with grpc.insecure_channel(server.grpc) as ch:
        fence_pb2_grpc.FenceServiceStub(ch).Revoke(
            fence_pb2.RevokeRequest(request_id=new_request_id(), lease_secret=l1._s.secret), timeout=5)
    assert l1.done.wait(3.0) and l2.done.wait(3.0)
    for lease in (l1, l2):
        e = lease.err()
        assert isinstance(e, fence.ExpiredError) and not isinstance(e, fence.LostContactError), e
        assert "the server ended" in str(e)
    fresh = c.lock(name(), timeout=10)  # a new lease for the next lock
    assert fresh.lease_number != l1.lease_number


def test_a_clock_jump_past_the_deadline_is_seen_on_the_first_look(server: Server, clients: Make) -> None:
    """A paused or suspended holder: err() reads the clock itself, before any
    thread has run. The clock is real time plus an offset the test moves."""
    class Jumpy:
        offset = 0.0

        def now(self) -> float:
            return time.clock_gettime(time.CLOCK_BOOTTIME) + self.offset
    clk = Jumpy()
    c = clients([server.grpc], ttl=10, clock=clk)
    lease = c.lock(name(), timeout=10)
    assert lease.err() is None and 8.0 < lease.time_left() <= 9.0
    clk.offset = 9.05  # past sent + ttl − margin (10 − 1): the renewals due meanwhile never ran
    assert isinstance(lease.err(), fence.ExpiredError)  # synchronously, on this first look
    assert lease.done.is_set() and lease.time_left() == 0.0


def test_close_revokes(server: Server, clients: Make) -> None:
    c = fence.Client([server.grpc], insecure=True, ttl=30)
    n = name()
    lease = c.lock(n, timeout=10)
    c.close()
    assert lease.done.is_set() and isinstance(lease.err(), fence.ClosedError)
    other = clients([server.grpc])
    assert not other.status(n).held  # revoked now, not after its 30 s TTL
    with pytest.raises(fence.ClosedError):
        c.lock(name(), timeout=1)


def test_bad_input_is_refused_and_changes_nothing(fresh_server: Server, clients: Make) -> None:
    s = fresh_server
    c = clients([s.grpc])
    first = c.lock("py/first", timeout=10)
    leases, token = s.metric("fence_active_leases"), s.metric("fence_last_token")
    assert (leases, token) == (1, first.token)
    cases: list[tuple[dict[str, Any], str]] = [
        (dict(name=""), "lock name is empty"),
        (dict(name="x" * 257), "257 bytes, the limit is 256"),
        (dict(name="bell\x07"), "control character"),
        (dict(name="py/ok", ttl=0), "TTL 0 must be a positive number"),
        (dict(name="py/ok", ttl=-5), "must be a positive number"),
        (dict(name="py/ok", ttl=0.5), "outside this server's bounds"),  # the server's 1s..1h
        (dict(name="py/ok", ttl=7200), "outside this server's bounds"),
        (dict(name="py/ok", safety_margin=40.0), "shorter than the TTL"),
        (dict(name="py/ok", lock_delay=-1), "lock delay"),
    ]
    for kw, msg in cases:
        n = kw.pop("name")
        with pytest.raises(fence.InvalidError, match=msg):
            c.lock(n, timeout=5, **kw)
    with pytest.raises(fence.InvalidError, match="positive number"):
        fence.Client([s.grpc], insecure=True, ttl=0)
    with pytest.raises(fence.InvalidError, match="no server address"):
        fence.Client([], insecure=True)
    with pytest.raises(fence.InvalidError, match="no TLS configured"):
        fence.Client([s.grpc], ca=None, cert="c.crt")
    assert (s.metric("fence_active_leases"), s.metric("fence_last_token")) == (leases, token)
    assert c.status("py/ok").holder_lease == 0
    second = c.lock("py/second", timeout=10)  # the next grant's token follows at once: none was made
    assert second.token == token + 1 and second.lease_number == first.lease_number


def test_tls_with_the_dev_certificates(fence_bin: str, tmp_path: Path) -> None:
    s = Server(fence_bin, tmp_path / "tls", tls=True).start()
    try:
        until("the node to lead", s.leads, timeout=20)
        with fence.Client([s.grpc], ca=str(s.tls_file("ca.crt")), cert=str(s.tls_file("client.crt")),
                          key=str(s.tls_file("client.key"))) as c:
            with c.lock(name(), timeout=10) as lease:
                assert lease.token > 0 and lease.signed_token  # the dev setup has a token key
        with pytest.raises(fence.UnreachableError):
            fence.Client([s.grpc], insecure=True, connect_timeout=1.0)  # plaintext to a TLS port
        with pytest.raises(fence.InvalidError, match="only over TLS"):
            fence.Client([s.grpc], insecure=True, token="t")
    finally:
        s.kill()


def test_unreachable(clients: Make) -> None:
    port = free_port()  # nothing listens there
    start = time.monotonic()
    with pytest.raises(fence.UnreachableError, match=f"127.0.0.1:{port}"):
        fence.Client([f"127.0.0.1:{port}"], insecure=True, connect_timeout=1.0)
    assert time.monotonic() - start < 5
    c = clients([f"127.0.0.1:{port}"], connect_timeout=None)
    with pytest.raises(fence.UnreachableError):
        c.lock(name(), timeout=1.0)


def test_semaphore_permits_slots_and_counts(server: Server, clients: Make) -> None:
    """Two permits from one Client at once (a lease each), each with its own
    token and slot; a third is refused; another count is PermitsError naming
    both; the freed slot is reused."""
    c, other = clients([server.grpc], owner="py-sem"), clients([server.grpc])
    n = name()
    sem = c.semaphore(n, 2)
    a, b = sem.acquire(timeout=10), sem.try_acquire(timeout=10)
    assert (a.slot, b.slot) == (0, 1) and b.token > a.token and a.lease_number != b.lease_number
    info = other.status(n)
    assert info.permits == 2 and [(g.token, g.slot, g.holder_owner) for g in info.grants] == [
        (a.token, 0, "py-sem"), (b.token, 1, "py-sem")]
    with pytest.raises(fence.LockedError):
        other.semaphore(n, 2).try_acquire(timeout=10)
    with pytest.raises(fence.PermitsError) as e:
        other.semaphore(n, 3).try_acquire(timeout=10)
    assert (e.value.permits, e.value.asked) == (2, 3) and "a semaphore of 2 permits" in str(e.value)
    with pytest.raises(fence.PermitsError) as e2:
        other.try_lock(n, timeout=10)
    assert (e2.value.permits, e2.value.asked) == (2, 1)
    with pytest.raises(fence.InvalidError):
        other.semaphore(n, 0).try_acquire(timeout=10)
    a.release()
    c3 = other.semaphore(n, 2).try_acquire(timeout=10)
    assert c3.slot == 0 and c3.token > b.token
    b.release()
    c3.release()


def test_rwlock_writer_queues_beside_its_clients_reader(server: Server, clients: Make) -> None:
    """A writer whose Client's other caller reads queues on the server at
    once, so another Client's reader that comes after it is refused (a
    writer that waited locally for its Client's reader let it pass)."""
    a, b = clients([server.grpc]), clients([server.grpc])
    n = name()
    r1 = a.rwlock(n).rlock(timeout=10)
    got: dict[str, Any] = {}

    def write() -> None:
        try:
            got["lease"] = a.rwlock(n).lock(timeout=10)
        except fence.FenceError as e:
            got["err"] = e

    t = threading.Thread(target=write)
    t.start()
    until("the writer in the server's queue (or its end)", lambda: b.status(n).waiters == 1 or not t.is_alive())
    assert t.is_alive(), f"the writer never queued on the server while its Client's reader held: {got}"
    with pytest.raises(fence.LockedError):
        b.rwlock(n).try_rlock(timeout=10)
    r1.release()
    t.join()
    got["lease"].release()


def test_rwlock_readers_together_writer_alone(server: Server, clients: Make) -> None:
    c, w = clients([server.grpc]), clients([server.grpc])
    n = name()
    r1, r2 = c.rwlock(n).rlock(timeout=10), c.rwlock(n).try_rlock(timeout=10)
    assert r1.shared and r2.shared and r2.token > r1.token
    with pytest.raises(fence.LockedError):
        w.rwlock(n).try_lock(timeout=10)
    r1.release()
    r2.release()
    writer = w.rwlock(n).try_lock(timeout=10)
    assert not writer.shared and writer.token > r2.token
    writer.release()
