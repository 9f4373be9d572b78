"""Three controller nodes replicating through Raft (``controllerDLegerPeers``), as real processes.

Three ``sparkmq controller`` nodes, a NameServer and three brokers in controller mode naming all
three nodes in ``controllerAddr``; SIGKILL of the controller leader, of the broker master, and of
both at once. Synchronised on what the controllers answer (CONTROLLER_GET_METADATA_INFO,
CONTROLLER_GET_REPLICA_INFO), never on sleeps.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkmq import Message, Producer
from sparkmq.protocol import RequestCode, ResponseCode
from support.controller_group import (
    GROUP,
    UNTIL_S,
    ControllerGroup,
    ControllerNodes,
    ask,
    assert_commitlogs_identical,
    metadata,
    read_all,
    send_until_ok,
)
from support.processes import wait_until


@pytest.fixture
def group(tmp_path: Path) -> Iterator[ControllerGroup]:
    with ControllerGroup(tmp_path, 3, controllers=3) as started:
        assert wait_until(started.all_in_sync, UNTIL_S), "the group never had a master with every replica in sync"
        yield started


def nodes_of(group: ControllerGroup) -> ControllerNodes:
    assert group.nodes is not None
    return group.nodes


def new_leader(nodes: ControllerNodes, old: int) -> int:
    assert wait_until(lambda: nodes.leader() not in (None, old), UNTIL_S), "no new controller leader"
    leader = nodes.leader()
    assert leader is not None
    return leader


def send_batch(producer: Producer, topic: str, prefix: bytes, count: int, acknowledged: list[bytes]) -> None:
    for i in range(count):
        body = b"%s %d" % (prefix, i)
        producer.send(Message(topic, body))
        acknowledged.append(body)


def fail_over_the_broker(group: ControllerGroup, producer: Producer, topic: str, acknowledged: list[bytes]) -> int:
    """SIGKILL the broker master; a replica of its SyncStateSet takes over; returns the new epoch."""
    old_id, _address, old_epoch, old_sync = group.replica_info()
    old = group.master_index()
    assert old is not None
    group.kill(old)
    assert wait_until(lambda: group.master_index() not in (None, old), UNTIL_S), "no broker master was elected"
    new_id, _new_address, new_epoch, _sync = group.replica_info()
    assert new_id in old_sync.members and new_id != old_id and new_epoch == old_epoch + 1
    send_until_ok(producer, topic, b"after epoch %d" % new_epoch)
    acknowledged.append(b"after epoch %d" % new_epoch)
    return new_epoch


def test_followers_answer_not_leader_and_name_the_leader(group: ControllerGroup) -> None:
    nodes = nodes_of(group)
    leader = nodes.leader()
    assert leader is not None
    peers = ";".join(f"n{i}-{address}" for i, address in enumerate(nodes.addresses))

    def every_node_lists_every_peer() -> bool:
        return all((metadata(address) or {}).get("peers") == peers for address in nodes.addresses)

    assert wait_until(every_node_lists_every_peer, UNTIL_S), "the nodes never agreed on the peers"
    for i, address in enumerate(nodes.addresses):
        response = ask(address, RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": GROUP})
        if i == leader:
            assert response.code == ResponseCode.SUCCESS
        else:
            assert response.code == ResponseCode.CONTROLLER_NOT_LEADER
            assert response.remark is not None and nodes.addresses[leader] in response.remark


def test_the_controller_leader_killed_then_the_broker_master_keeps_state_and_loses_nothing(
    group: ControllerGroup,
) -> None:
    """kill -9 of the controller leader: a new one keeps the tables; then a broker failover still works;
    the restarted node catches up from its journal and the log (it is needed for the next commit)."""
    assert group.namesrv is not None
    nodes, namesrv, topic = nodes_of(group), group.namesrv.address, "RaftCtl"
    before = group.replica_info()
    acknowledged: list[bytes] = []
    with Producer("PID_RAFT", namesrv, send_timeout_s=5.0) as producer:
        send_batch(producer, topic, b"before", 30, acknowledged)
        old_leader = nodes.leader()
        assert old_leader is not None
        nodes.kill(old_leader)
        leader = new_leader(nodes, old_leader)
        assert group.replica_info() == before  # the tables survived the leader
        send_batch(producer, topic, b"new controller leader", 10, acknowledged)
        epoch = fail_over_the_broker(group, producer, topic, acknowledged)

        nodes.start_node(old_leader)  # catches up; then the leader commits only with it (the third is down)
        assert wait_until(lambda: nodes.leader() == leader, UNTIL_S), "the restarted node never joined"
        other = next(i for i in nodes.live() if i not in (leader, old_leader))
        nodes.kill(other)
        epoch = fail_over_the_broker(group, producer, topic, acknowledged)
        assert group.replica_info()[2] == epoch
        send_batch(producer, topic, b"last", 10, acknowledged)
    assert set(acknowledged) <= read_all(namesrv, topic, set(acknowledged))
    assert_commitlogs_identical(group)


def test_the_controller_leader_and_the_broker_master_killed_together(group: ControllerGroup) -> None:
    """The surviving controllers saw the master's connection close: the new leader elects at once."""
    assert group.namesrv is not None
    nodes, namesrv, topic = nodes_of(group), group.namesrv.address, "RaftBoth"
    old_id, _address, old_epoch, old_sync = group.replica_info()
    old_master, old_leader = group.master_index(), nodes.leader()
    assert old_master is not None and old_leader is not None
    acknowledged: list[bytes] = []
    with Producer("PID_RAFT", namesrv, send_timeout_s=5.0) as producer:
        send_batch(producer, topic, b"before", 30, acknowledged)
        nodes.kill(old_leader)
        group.kill(old_master)
        new_leader(nodes, old_leader)
        assert wait_until(lambda: group.master_index() not in (None, old_master), UNTIL_S), "no master elected"
        new_id, _new_address, new_epoch, _sync = group.replica_info()
        assert new_id in old_sync.members and new_id != old_id and new_epoch == old_epoch + 1
        send_until_ok(producer, topic, b"after")
        acknowledged.append(b"after")
        send_batch(producer, topic, b"later", 10, acknowledged)
    assert set(acknowledged) <= read_all(namesrv, topic, set(acknowledged))
    group.start_broker(old_master)  # the old master rejoins the new one as a replica
    assert wait_until(group.all_in_sync, UNTIL_S), "the old master never rejoined the SyncStateSet"
    assert_commitlogs_identical(group)
