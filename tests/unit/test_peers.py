"""Sharing out due periods: every job has exactly one owner among the peers, the same
on every node, and the shares are even."""

from __future__ import annotations

from collections import Counter

from scheduler.node.peers import Peers, jobs_digest
from scheduler.registry import job

JOBS = [f"job-{index:05d}" for index in range(3000)]
PEERS = ["node-a-1f2e3d", "node-b-4c5b6a", "node-c-7a8b9c"]


def _owners(peers: list[str]) -> dict[str, list[str]]:
    views = {node: Peers(node) for node in peers}
    for shares in views.values():
        shares.update(list(reversed(peers)))  # the order read does not matter
    return {name: [node for node, shares in views.items() if shares.mine(name)] for name in JOBS}


def test_each_job_has_one_owner_and_the_shares_are_even() -> None:
    owners = _owners(PEERS)
    assert all(len(nodes) == 1 for nodes in owners.values())
    counts = Counter(nodes[0] for nodes in owners.values())
    assert set(counts) == set(PEERS)
    assert all(800 <= count <= 1200 for count in counts.values()), counts


def test_a_node_alone_owns_everything_and_counts_itself_in() -> None:
    alone = Peers("node-a")
    assert all(alone.mine(name) for name in JOBS[:100])
    alone.update([])  # a view without itself (its row not read yet) still includes it
    assert alone.peers == ("node-a",)
    assert all(alone.mine(name) for name in JOBS[:100])


def test_a_new_peer_takes_part_of_the_shares() -> None:
    shares = Peers("node-a")
    shares.update(["node-a"])
    assert all(shares.mine(name) for name in JOBS)
    shares.update(["node-a", "node-b"])
    assert 0 < sum(shares.mine(name) for name in JOBS) < len(JOBS)


def test_the_digest_follows_names_and_schedules_not_order() -> None:
    def body() -> None:
        pass

    one = job("* * * * *", name="one")(body)
    two = job("0 * * * *", name="two")(body)
    two_daily = job("0 0 * * *", name="two")(body)
    assert jobs_digest([one, two]) == jobs_digest([two, one])
    assert jobs_digest([one, two]) != jobs_digest([one, two_daily])
    assert jobs_digest([one, two]) != jobs_digest([one])
