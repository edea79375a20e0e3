"""The client against a real 3-member cluster: leader following."""

from __future__ import annotations

import time
from typing import Callable

import fence
from conftest import Server, until

Make = Callable[..., fence.Client]


def test_not_leader_following_across_a_leader_transfer(cluster: list[Server], clients: Make) -> None:
    leader = until("a leader", lambda: next((n for n in cluster if n.leads()), None), timeout=20)
    follower, target = [n for n in cluster if n is not leader]
    # Only a follower's address: every call is refused there with NotLeader,
    # whose leader_addr the client must follow (and add to its members).
    c = clients([follower.grpc], ttl=1.5)
    lease = c.lock("py/transfer", timeout=15)
    assert leader.grpc in [m.addr for m in c._t.members()]
    assert {m.id for m in c.members()} == {"n1", "n2", "n3"}

    out = leader.cli("members", "transfer", target.node_id)
    assert target.node_id in out
    until(f"{target.node_id} to lead", target.leads, timeout=15)
    # The lease keeps renewing through the change, on the new leader (the old
    # one ends the stream with NotLeader naming it), for three TTLs.
    end = time.monotonic() + 4.5
    while time.monotonic() < end:
        assert lease.err() is None, lease.err()
        time.sleep(0.05)
    assert target.grpc in [m.addr for m in c._t.members()]
    second = c.lock("py/transfer-2", timeout=10)
    assert second.token > lease.token and second.lease_number == lease.lease_number
    second.release()
    lease.release()
    assert not c.status("py/transfer").held
