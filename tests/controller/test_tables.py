"""The controller's tables: a commit is a compare-and-set on the revision, on one node's file and
through Raft among three in-process nodes on real sockets."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from sparkmq.controller.config import ControllerConfig
from sparkmq.controller.tables import FileTables, RaftTables
from support.rocketmq_java import free_port

UNTIL_S = 30.0


async def eventually(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + UNTIL_S
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def test_a_file_commit_on_a_stale_revision_is_refused(tmp_path: Path) -> None:
    async def run() -> None:
        tables = FileTables(ControllerConfig(tmp_path))
        await tables.start("127.0.0.1:1")
        assert await tables.commit(0, {"a": 1}) and tables.snapshot()[0] == 1
        assert not await tables.commit(0, {"a": 2})
        again = FileTables(ControllerConfig(tmp_path))
        await again.start("127.0.0.1:1")
        assert again.snapshot()[1] == {"a": 1}

    asyncio.run(run())


def test_three_raft_nodes_agree_and_refuse_stale_or_follower_commits(tmp_path: Path) -> None:
    peers = tuple((f"n{i}", f"127.0.0.1:{free_port()}") for i in range(3))
    nodes = [RaftTables(ControllerConfig(tmp_path / node_id, peers=peers, self_id=node_id)) for node_id, _ in peers]

    async def run() -> None:
        for i, node in enumerate(nodes):
            await node.start(f"127.0.0.1:{9000 + i}")
        try:
            await eventually(lambda: sum(n.is_leader() for n in nodes) == 1, "a leader")
            leader = next(n for n in nodes if n.is_leader())
            for node in nodes:
                await node.announce()
            await eventually(lambda: all(n.peers()[i][1] for n in nodes for i in range(3)), "every address")
            assert await leader.commit(leader.snapshot()[0], {"groups": 1})
            await eventually(lambda: all(n.snapshot()[1] == {"groups": 1} for n in nodes), "the state on every node")
            assert not await leader.commit(leader.snapshot()[0] - 1, {"groups": 2})  # a stale revision
            follower = next(n for n in nodes if not n.is_leader())
            assert not await follower.commit(follower.snapshot()[0], {"groups": 3})
            assert all(n.snapshot()[1] == {"groups": 1} for n in nodes)
            assert {n.leader() for n in nodes} == {leader.leader()}
        finally:
            for node in nodes:
                await node.close()

    asyncio.run(run())
