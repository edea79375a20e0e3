"""The pure parts of the client contract (docs/protocol.md), with no I/O:
the clock, the safety margin, the local deadline, the renewal schedule, the
numbering of Acquire and Release calls (seq/ack/open), and the checks of
names, owners and TTLs. The unit tests drive them with a fake clock.
"""

from __future__ import annotations

import math
import threading
import time
import unicodedata
from typing import Optional, Protocol

from .errors import InvalidError


class Clock(Protocol):
    """Where lease times are read (seconds). Tests inject a fake."""

    def now(self) -> float: ...


class BootClock:
    """CLOCK_BOOTTIME (§6.1): never jumps, and keeps counting while the host
    is suspended. Where it does not exist (not Linux) CLOCK_MONOTONIC stands
    in; on such a host a suspend is not counted, so keep the margin wide."""

    _id = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)

    def now(self) -> float:
        return time.clock_gettime(self._id)


# §6.2: margin = max(ttl/10, ttl × 1000 ppm + 10 ms). 1000 ppm: two clocks,
# each within NTP's 500 ppm of true rate, erring in opposite directions; 10 ms:
# the holder's reaction time (timer latency).
DRIFT_PPM = 1000
MARGIN_FLOOR = 0.010
# §6.4: retries of a failing renewal at most this far apart.
RETRY_CAP = 0.25
# The fsm's hard limit on a TTL (servers' own bounds are tighter: 1s..1h by default).
MAX_TTL = 24 * 3600.0


def min_safety_margin(ttl: float) -> float:
    return ttl * DRIFT_PPM / 1_000_000 + MARGIN_FLOOR


def safety_margin(ttl: float, margin: Optional[float] = None) -> float:
    """The margin of a lease of ttl: margin, or ttl/10 by default, raised to
    min_safety_margin. A margin that leaves no time is an InvalidError."""
    if margin is not None and (isinstance(margin, bool) or not isinstance(margin, (int, float))
                               or not math.isfinite(margin) or margin < 0):
        raise InvalidError(f"safety margin {margin!r} must be a non-negative number of seconds")
    m = ttl / 10 if not margin else float(margin)
    m = max(m, min_safety_margin(ttl))
    if m >= ttl:
        raise InvalidError(f"safety margin {m:g}s must be shorter than the TTL {ttl:g}s")
    return m


def renew_interval(ttl: float) -> float:
    """§6.4 and §6.5: renew ttl/3 after the last success was sent, and wait at
    most ttl/3 for a renewal's answer."""
    return ttl / 3


def retry_every(ttl: float) -> float:
    """§6.4: a failed renewal is retried every min(ttl/3, 250 ms)."""
    return min(ttl / 3, RETRY_CAP)


class Deadline:
    """The local deadline of a lease (§6.2): sent + ttl − margin, where sent is
    when the request that granted ttl was SENT (CreateLease's first attempt,
    then each successful renewal). It only moves forward, and an answer that
    arrives after it passed does not bring the lease back."""

    def __init__(self, sent: float, ttl: float, margin: float) -> None:
        self.margin = margin
        self.at = sent + ttl - margin

    def passed(self, now: float) -> bool:
        return now >= self.at

    def left(self, now: float) -> float:
        return max(0.0, self.at - now)

    def renewed(self, sent: float, ttl: float, now: float) -> bool:
        """Records a renewal sent at sent that granted ttl, answered at now.
        False if it came too late (the deadline had passed): it changes nothing."""
        if self.passed(now):
            return False
        self.at = max(self.at, sent + ttl - self.margin)
        return True


class Calls:
    """Numbers a lease's Acquire and Release calls (§5): seq from 1, a new
    number per call (the same on its retries), and keeps the numbers whose
    answers have not arrived. A request of call seq acknowledges with ack,
    the lowest number still unanswered (seq itself if none below), and open,
    the other unanswered numbers between ack and seq."""

    def __init__(self) -> None:
        self._mu = threading.Lock()
        self._last = 0
        self._open: set[int] = set()

    def begin(self) -> int:
        with self._mu:
            self._last += 1
            self._open.add(self._last)
            return self._last

    def answered(self, seq: int) -> None:
        """The outcome of call seq is known (granted or a definitive refusal)."""
        with self._mu:
            self._open.discard(seq)

    def acks(self, seq: int) -> tuple[int, list[int]]:
        with self._mu:
            ack = min([seq, *self._open])
            return ack, sorted(o for o in self._open if ack < o < seq)


MAX_NAME_BYTES = 256


def check_name(what: str, s: object) -> str:
    """A lock name: 1–256 bytes of UTF-8 without control characters (§3)."""
    if not isinstance(s, str):
        raise InvalidError(f"{what} must be a str, not {type(s).__name__}")
    if s == "":
        raise InvalidError(f"{what} is empty")
    return _check_text(what, s)


def check_owner(s: str) -> str:
    """An owner label: at most 256 bytes of the same characters (may be empty)."""
    return _check_text("owner", s) if s else s


def _check_text(what: str, s: str) -> str:
    try:
        n = len(s.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidError(f"{what} is not valid UTF-8 (it holds a lone surrogate)") from None
    if n > MAX_NAME_BYTES:
        raise InvalidError(f"{what} is {n} bytes, the limit is {MAX_NAME_BYTES}")
    for i, ch in enumerate(s):
        if unicodedata.category(ch) == "Cc":
            raise InvalidError(f"{what} has a control character (U+{ord(ch):04X}) at character {i}")
    return s


def check_ttl(ttl: object) -> float:
    """A TTL in seconds: positive, finite, within the fsm's hard limit. The
    server checks its own bounds (default 1s..1h) and refuses the rest."""
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not math.isfinite(ttl) or ttl <= 0:
        raise InvalidError(f"TTL {ttl!r} must be a positive number of seconds")
    if ttl > MAX_TTL:
        raise InvalidError(f"TTL {ttl!r}s is above the longest any fence server takes ({MAX_TTL:g}s)")
    return float(ttl)
