"""Unit tests of the pure parts: the margin, the local deadline, the renewal
figures, seq/ack/open bookkeeping, the checks of names and TTLs, and the
decoding of status details. No server, no network."""

from __future__ import annotations

import math
import time

import grpc
import pytest

from fence import InvalidError, _rules, _status
from fence._rules import Calls, Deadline
from fence.v1 import fence_pb2


class FakeClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def now(self) -> float:
        return self.t


def test_boot_clock_is_clock_boottime() -> None:
    if not hasattr(time, "CLOCK_BOOTTIME"):
        pytest.skip("no CLOCK_BOOTTIME on this platform")
    a = _rules.BootClock().now()
    b = time.clock_gettime(time.CLOCK_BOOTTIME)
    assert 0 <= b - a < 1


@pytest.mark.parametrize("ttl,want", [
    (30.0, 3.0),            # ttl/10
    (1.0, 0.1),
    (0.1, 0.0101),          # ttl × 1000 ppm + 10 ms is larger below ~111 ms
    (0.05, 0.01005),
])
def test_safety_margin(ttl: float, want: float) -> None:
    assert math.isclose(_rules.safety_margin(ttl), want, rel_tol=1e-9)


def test_safety_margin_raised_to_the_floor_and_refused_when_it_leaves_nothing() -> None:
    assert math.isclose(_rules.safety_margin(30.0, 0.001), 30 * 0.001 + 0.010)
    assert _rules.safety_margin(30.0, 5.0) == 5.0
    with pytest.raises(InvalidError, match="shorter than the TTL"):
        _rules.safety_margin(0.01)
    with pytest.raises(InvalidError, match="shorter than the TTL"):
        _rules.safety_margin(10.0, 10.0)
    with pytest.raises(InvalidError, match="non-negative"):
        _rules.safety_margin(10.0, -1.0)


def test_renewal_figures() -> None:
    assert _rules.renew_interval(30.0) == 10.0
    assert _rules.retry_every(30.0) == 0.25       # min(ttl/3, 250 ms)
    assert math.isclose(_rules.retry_every(0.6), 0.2)


def test_deadline_counts_from_the_send_time() -> None:
    clk = FakeClock(100.0)
    d = Deadline(sent=clk.now(), ttl=30.0, margin=3.0)
    assert d.at == 127.0
    clk.t = 115.0  # the renewal sent at 110 is answered at 115
    assert d.renewed(sent=110.0, ttl=30.0, now=clk.now())
    assert d.at == 137.0  # 110 + 30 − 3, not 115 + 30 − 3
    assert math.isclose(d.left(clk.now()), 22.0)


def test_deadline_only_moves_forward() -> None:
    d = Deadline(sent=100.0, ttl=30.0, margin=3.0)
    assert d.renewed(sent=120.0, ttl=30.0, now=121.0)
    assert d.at == 147.0
    assert d.renewed(sent=110.0, ttl=30.0, now=122.0)  # an older renewal answered late
    assert d.at == 147.0
    assert d.renewed(sent=121.0, ttl=5.0, now=123.0)  # a shorter TTL does not pull it back
    assert d.at == 147.0


def test_an_answer_after_the_deadline_does_not_bring_the_lease_back() -> None:
    d = Deadline(sent=100.0, ttl=30.0, margin=3.0)
    assert not d.passed(126.999)
    assert d.passed(127.0)
    assert not d.renewed(sent=126.0, ttl=30.0, now=127.5)
    assert d.at == 127.0
    assert d.left(130.0) == 0.0


def test_calls_numbering_ack_and_open() -> None:
    c = Calls()
    assert [c.begin(), c.begin(), c.begin()] == [1, 2, 3]
    assert c.acks(3) == (1, [2])           # 1 and 2 unanswered
    c.answered(2)
    assert c.acks(3) == (1, [])
    c.answered(1)
    assert c.acks(3) == (3, [])            # nothing below: ack is its own seq
    c.answered(3)
    four, five = c.begin(), c.begin()      # 4 waits in a queue, 5 is answered
    c.answered(five)
    six = c.begin()
    assert (four, five, six) == (4, 5, 6)
    assert c.acks(6) == (4, [])            # the waiting call holds ack back, 5 is acknowledged
    seven = c.begin()
    assert c.acks(seven) == (4, [6])       # 6 still open above ack
    c.answered(four)
    assert c.acks(seven) == (6, [])


def test_calls_never_acknowledge_an_unanswered_call() -> None:
    c = Calls()
    seqs = [c.begin() for _ in range(20)]
    unanswered = {3, 7, 8, 15}
    for s in seqs:
        if s not in unanswered:
            c.answered(s)
    ack, open_ = c.acks(21)
    assert ack == 3 and open_ == [7, 8, 15]
    # every number below 21 that is neither ack nor open is one whose answer we have
    acknowledged = {n for n in range(1, 21) if n != ack and n not in open_}
    assert not acknowledged & unanswered


@pytest.mark.parametrize("name,why", [
    ("", "empty"),
    ("x" * 257, "257 bytes"),
    ("é" * 129, "258 bytes"),           # counted in UTF-8 bytes, not characters
    ("a\x07b", "control character"),
    ("a\nb", "control character"),
    ("a\x85b", "control character"),    # C1 controls too (Go's unicode.IsControl)
    ("a\ud800", "UTF-8"),               # a lone surrogate cannot be encoded
])
def test_check_name_refuses(name: str, why: str) -> None:
    with pytest.raises(InvalidError, match=why):
        _rules.check_name("lock name", name)


def test_check_name_takes_256_bytes_and_unicode() -> None:
    assert _rules.check_name("lock name", "x" * 256)
    assert _rules.check_name("lock name", "jobs/ночной-é")


@pytest.mark.parametrize("ttl", [0, -1, 0.0, math.nan, math.inf, True, "30", None, 86401])
def test_check_ttl_refuses(ttl: object) -> None:
    with pytest.raises(InvalidError, match="TTL"):
        _rules.check_ttl(ttl)


class FakeRpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, msg: str = "", trailers: tuple[tuple[str, bytes], ...] = ()) -> None:
        self._code, self._msg, self._trailers = code, msg, trailers

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._msg

    def trailing_metadata(self) -> tuple[tuple[str, bytes], ...]:
        return self._trailers


def status_trailer(code: int, *msgs: object) -> tuple[tuple[str, bytes], ...]:
    st = _status.Status(code=code, message="m")
    for m in msgs:
        d = st.details.add()
        d.type_url = "type.googleapis.com/" + m.DESCRIPTOR.full_name  # type: ignore[attr-defined]
        d.value = m.SerializeToString()  # type: ignore[attr-defined]
    return (("grpc-status-details-bin", st.SerializeToString()),)


def test_status_details_decoded() -> None:
    nl = fence_pb2.NotLeader(leader_id="n2", leader_addr="127.0.0.1:7310")
    held = fence_pb2.LockHeld(name="a", holder_lease_number=3, holder_owner="o", token=9)
    err = FakeRpcError(grpc.StatusCode.UNAVAILABLE, "not the leader", status_trailer(14, nl, held))
    ds = _status.details(err)
    assert ds == [nl, held]
    assert _status.code(err) == grpc.StatusCode.UNAVAILABLE
    assert _status.message_of(err) == "not the leader"


def test_status_without_details() -> None:
    err = FakeRpcError(grpc.StatusCode.UNAVAILABLE, "", (("other", b"x"),))
    assert _status.details(err) == []
    assert _status.message_of(err) == "UNAVAILABLE"
