"""The renewal loop (docs/protocol.md §6) driven by a fake clock and a fake
KeepAlive stream: what it sends when, and what it makes of each answer.
The clock only moves when a test moves it; the loop looks at it at least
every 0.25 s of real time, so every step here is waited for (bounded)."""

from __future__ import annotations

import queue
import threading
from typing import Iterator, Optional, Union

import grpc
import pytest

from conftest import until
from fence import ExpiredError, FenceError, LostContactError, RevokedError
from fence._session import Session
from fence.v1 import fence_pb2
from test_rules import FakeClock, FakeRpcError

WAIT = 3.0  # real seconds any one step may take


class FakeCall:
    """One KeepAlive stream: the requests the session sent, the answers the test gives."""

    def __init__(self, reqs: Iterator[fence_pb2.KeepAliveRequest]) -> None:
        self.requests: "queue.Queue[fence_pb2.KeepAliveRequest]" = queue.Queue()
        self.answers: "queue.Queue[Union[fence_pb2.KeepAliveResponse, BaseException, None]]" = queue.Queue()
        self.cancelled = threading.Event()
        threading.Thread(target=self._take, args=(reqs,), daemon=True).start()

    def _take(self, reqs: Iterator[fence_pb2.KeepAliveRequest]) -> None:
        for r in reqs:
            self.requests.put(r)

    def __iter__(self) -> Iterator[fence_pb2.KeepAliveResponse]:
        while True:
            a = self.answers.get()
            if a is None:
                return
            if isinstance(a, BaseException):
                raise a
            yield a

    def cancel(self) -> None:
        self.cancelled.set()
        self.answers.put(FakeRpcError(grpc.StatusCode.CANCELLED, "cancelled"))

    def request(self) -> fence_pb2.KeepAliveRequest:
        return self.requests.get(timeout=WAIT)

    def answer(self, seq: int, ok: bool = True, ttl: float = 30.0, held: tuple[int, ...] = (),
               error: str = "") -> None:
        r = fence_pb2.KeepAliveResponse(seq=seq, ok=ok, held_tokens=held, error=error)
        r.ttl.FromNanoseconds(round(ttl * 1e9))
        self.answers.put(r)


class FakeStub:
    def __init__(self) -> None:
        self.streams: "queue.Queue[FakeCall]" = queue.Queue()

    def KeepAlive(self, reqs: Iterator[fence_pb2.KeepAliveRequest]) -> FakeCall:
        c = FakeCall(reqs)
        self.streams.put(c)
        return c


class FakeMember:
    def __init__(self, stub: FakeStub) -> None:
        self.stub = stub


class FakeTransport:
    def __init__(self) -> None:
        self.stub = FakeStub()
        self.idx = 0
        self.moved: "queue.Queue[Optional[BaseException]]" = queue.Queue()

    def current(self) -> tuple[int, FakeMember]:
        return self.idx, FakeMember(self.stub)

    def move_on(self, idx: int, err: Optional[BaseException]) -> None:
        self.idx += 1
        self.moved.put(err)

    def stream(self) -> FakeCall:
        return self.stub.streams.get(timeout=WAIT)


class FakeGrant:
    def __init__(self, name: str, token: int) -> None:
        self.name, self.token = name, token
        self.revoked: Optional[FenceError] = None
        self.finished = threading.Event()

    def _finish(self) -> None:
        self.finished.set()

    def _revoke(self, err: FenceError) -> None:
        self.revoked = err
        self.finished.set()


@pytest.fixture
def lease() -> Iterator[tuple[Session, FakeTransport, FakeClock]]:
    """A session of ttl 30 s (margin 3 s) created at clock time 100."""
    clk = FakeClock(100.0)
    t = FakeTransport()
    resp = fence_pb2.CreateLeaseResponse(lease_secret=b"s" * 16, lease_number=7)
    resp.ttl.FromSeconds(30)
    s = Session(t, clk, 30.0, 3.0, "owner", resp, sent=clk.now(), on_end=lambda s: None)  # type: ignore[arg-type]
    yield s, t, clk
    s.end(ExpiredError("test over"))


def renew_once(s: Session, t: FakeTransport, clk: FakeClock) -> FakeCall:
    """Moves the clock to the first renewal (110) and answers it at 115."""
    clk.t = 110.0
    call = t.stream()
    r = call.request()
    assert (r.seq, r.lease_secret) == (1, b"s" * 16)
    clk.t = 115.0
    call.answer(1)
    until("the renewal to count", lambda: s.deadline() != 127.0, WAIT)
    return call


def test_first_deadline_and_renewal_schedule(lease: tuple[Session, FakeTransport, FakeClock]) -> None:
    s, t, clk = lease
    assert s.deadline() == 127.0  # created at 100: 100 + 30 − 3
    clk.t = 109.9
    with pytest.raises(queue.Empty):
        t.stub.streams.get(timeout=0.6)  # nothing before ttl/3 after the send
    call = renew_once(s, t, clk)
    assert s.deadline() == 137.0  # from the renewal's SEND time (110), not its answer (115)
    clk.t = 119.9
    with pytest.raises(queue.Empty):
        call.requests.get(timeout=0.6)
    clk.t = 120.0  # ttl/3 after the last successful renewal was sent
    assert call.request().seq == 2
    assert t.stub.streams.empty()  # the same stream


def test_ok_false_ends_the_lease(lease: tuple[Session, FakeTransport, FakeClock]) -> None:
    s, t, clk = lease
    g = FakeGrant("a", 5)
    s.track(g)
    clk.t = 110.0
    call = t.stream()
    call.request()
    call.answer(1, ok=False)
    assert s.ended.wait(WAIT)
    assert isinstance(s.end_err(), ExpiredError)
    assert "the server ended lease #7" in str(s.end_err())
    assert g.finished.is_set() and g.revoked is None
    assert call.cancelled.wait(WAIT)


def test_ok_false_with_error_is_a_failed_renewal_not_an_end(lease: tuple[Session, FakeTransport, FakeClock]) -> None:
    s, t, clk = lease
    clk.t = 110.0
    call = t.stream()
    call.request()
    call.answer(1, ok=False, error="lease_secret is 3 bytes")
    until("jeopardy", s.jeopardy, WAIT)
    assert "lease_secret is 3 bytes" in (s.jeopardy() or "")
    assert s.end_err() is None and s.deadline() == 127.0
    clk.t = 110.25  # retried after min(ttl/3, 250 ms), on the same stream
    assert call.request().seq == 2
    assert t.stub.streams.empty() and t.moved.empty()
    call.answer(2)
    until("renewed", lambda: s.deadline() == 137.25, WAIT)
    assert s.jeopardy() is None


def test_answers_are_matched_by_seq(lease: tuple[Session, FakeTransport, FakeClock]) -> None:
    s, t, clk = lease
    clk.t = 110.0
    call = t.stream()
    call.request()
    call.answer(99, ok=False)  # not ours: skipped (else it would end the lease)
    call.answer(98, ttl=3000)  # not ours: skipped (else the deadline would jump)
    call.answer(1)
    until("renewed", lambda: s.deadline() != 127.0, WAIT)
    assert s.deadline() == 137.0 and s.end_err() is None


def test_no_answer_within_ttl_over_3_moves_to_the_next_member(lease: tuple[Session, FakeTransport, FakeClock]) -> None:
    s, t, clk = lease
    clk.t = 110.0
    first = t.stream()
    assert first.request().seq == 1
    clk.t = 119.99
    with pytest.raises(queue.Empty):
        t.moved.get(timeout=0.6)
    clk.t = 120.0  # ttl/3 without an answer: drop the stream, next member
    assert t.moved.get(timeout=WAIT) is None
    assert first.cancelled.wait(WAIT)
    assert "no answer" in (s.jeopardy() or "")
    clk.t = 120.25
    second = t.stream()
    assert second.request().seq == 2
    first.answer(1)  # the given-up renewal's answer, late, on the dropped stream: ignored
    second.answer(2)
    until("renewed", lambda: s.deadline() == 147.25, WAIT)  # 120.25 + 30 − 3
    assert s.jeopardy() is None


def test_failing_renewals_until_the_deadline_end_the_lease(lease: tuple[Session, FakeTransport, FakeClock]) -> None:
    s, t, clk = lease
    g = FakeGrant("a", 5)
    s.track(g)
    clk.t = 110.0
    call = t.stream()
    call.request()
    call.answers.put(FakeRpcError(grpc.StatusCode.INTERNAL, "boom"))
    until("jeopardy", s.jeopardy, WAIT)
    assert s.end_err() is None
    clk.t = 110.25
    retry = t.stream()  # the retry, on the next member; its answer will come too late
    assert retry.request().seq == 2
    clk.t = 126.999
    assert s.end_err() is None
    clk.t = 127.0  # the local deadline: the holder stops, whatever the network says
    assert isinstance(s.end_err(), LostContactError)
    assert g.finished.wait(WAIT)
    retry.answer(2)
    assert retry.cancelled.wait(WAIT)
    assert isinstance(s.end_err(), LostContactError) and s.deadline() == 127.0


def test_deadline_ends_the_lease_without_anyone_looking(lease: tuple[Session, FakeTransport, FakeClock]) -> None:
    s, t, clk = lease
    clk.t = 200.0  # a pause (or suspend) past the deadline: the loop ends it by itself
    assert s.ended.wait(WAIT)
    assert isinstance(s._err, ExpiredError)


def test_held_tokens_end_force_released_grants_only(lease: tuple[Session, FakeTransport, FakeClock]) -> None:
    s, t, clk = lease
    clk.t = 105.0
    gone, kept = FakeGrant("a", 5), FakeGrant("b", 6)
    s.track(gone)
    s.track(kept)
    clk.t = 110.0
    call = t.stream()
    call.request()
    clk.t = 111.0
    newer = FakeGrant("c", 8)  # granted after the renewal was sent: the answer may predate it
    s.track(newer)
    call.answer(1, held=(6,))
    assert gone.finished.wait(WAIT)
    assert isinstance(gone.revoked, RevokedError) and "'a' (token 5)" in str(gone.revoked)
    assert kept.revoked is None and newer.revoked is None and not newer.finished.is_set()
    assert s.end_err() is None  # the lease lives on


def test_unavailable_stream_end_renews_at_once_on_the_leader(lease: tuple[Session, FakeTransport, FakeClock]) -> None:
    s, t, clk = lease
    call = renew_once(s, t, clk)
    clk.t = 113.0  # idle until 120; the member stops leading and ends the stream
    call.answers.put(FakeRpcError(grpc.StatusCode.UNAVAILABLE, "not the leader"))
    moved = t.moved.get(timeout=WAIT)
    assert isinstance(moved, FakeRpcError)  # move_on gets the error, to read its NotLeader detail
    second = t.stream()
    assert second.request().seq == 2  # at once, the clock has not moved
    assert clk.t == 113.0
    second.answer(2)
    until("renewed", lambda: s.deadline() == 140.0, WAIT)
