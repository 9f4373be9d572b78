"""Issue 32, tables across a failover: a master and its replica (controller mode, real processes) share one
table root; the master writes a topic's table and is killed with SIGKILL mid-stream; the replica the
controller promotes continues the table from its queues' Delta transaction versions: every offset of
every queue once, none missing, every acknowledged message in it.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from deltalake import DeltaTable

from sparkmq import Message, Producer
from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.protocol.namesrv_bodies import TopicConfigSerializeWrapper
from sparkmq.protocol.table_bodies import TableStatusBody
from sparkmq.tables.layout import table_uri
from support.controller_group import UNTIL_S, ControllerGroup, ask, send_until_ok
from support.ha_checks import send
from support.processes import BrokerProcess, wait_until
from support.table_wire import topic_fields

TOPIC = "TableFailover"
QUEUES = 2


def _create_table_topic(address: str) -> None:
    response = ask(address, RequestCode.UPDATE_AND_CREATE_TOPIC, topic_fields(TOPIC, "+table.enable=true", QUEUES))
    assert response.code == ResponseCode.SUCCESS, response.remark


def _status(address: str) -> TableStatusBody | None:
    response = ask(address, RequestCode.SPARKMQ_TABLE_STATUS, {"topic": TOPIC})
    return TableStatusBody.decode(response.body) if response.code == ResponseCode.SUCCESS else None


def _table_holds(address: str, total: int) -> bool:
    """The broker at ``address`` has written all of its ``total`` (at least) messages into the table."""
    status = _status(address)
    return status is not None and (
        status.state == "ok"
        and bool(status.queues)
        and all(q.table_offset == q.max_offset for q in status.queues)
        and sum(q.max_offset for q in status.queues) >= total
    )


def _knows_table(address: str) -> bool:
    """The broker at ``address`` has the topic with its table attribute (a replica: from its last topic sync)."""
    response = ask(address, RequestCode.GET_ALL_TOPIC_CONFIG)
    if response.code != ResponseCode.SUCCESS:
        return False
    config = TopicConfigSerializeWrapper.decode(response.body).topic_config_table.get(TOPIC)
    return config is not None and config.attribute_map.get("table.enable") == "true"


def _why_not(broker: BrokerProcess) -> str:
    """What the promoted broker says about the table, and its log's end."""
    response = ask(broker.address, RequestCode.SPARKMQ_TABLE_STATUS, {"topic": TOPIC})
    status = TableStatusBody.decode(response.body) if response.code == ResponseCode.SUCCESS else None
    log = "\n".join(broker.output[-40:])
    return f"the table stopped: code {response.code} {response.remark!r} {status}\n{log}"


def test_a_promoted_replica_continues_the_table_with_no_duplicate_and_no_gap(tmp_path: Path) -> None:
    tables = tmp_path / "tables"
    settings = ("--set", f"tableTopicRoot={tables}", "--set", "tableTopicCommitIntervalMs=100")
    with ControllerGroup(tmp_path, 2, settings) as group:
        assert wait_until(group.all_in_sync, UNTIL_S), "the group never had a master with its replica in sync"
        old = group.master_index()
        assert old is not None and group.brokers[old] is not None and group.namesrv is not None
        _create_table_topic(group.brokers[old].address)
        acknowledged: list[bytes] = []
        with Producer("PID_TABLE", group.namesrv.address, send_timeout_s=5.0) as producer:
            for i in range(30):
                producer.send(Message(TOPIC, b"before %d" % i))
                acknowledged.append(b"before %d" % i)
            assert wait_until(lambda: _table_holds(group.brokers[old].address, 30), UNTIL_S)  # type: ignore[union-attr]
            for i in range(30, 40):  # while the master may be writing them
                producer.send(Message(TOPIC, b"before %d" % i))
                acknowledged.append(b"before %d" % i)
            # topic metadata reaches a replica by its periodic sync (Java's SlaveSynchronize), not with the data
            replica = group.brokers[1 - old]
            assert replica is not None and wait_until(lambda: _knows_table(replica.address), UNTIL_S)
            group.kill(old)
            assert wait_until(lambda: group.master_index() not in (None, old), UNTIL_S), "no replica was elected"
            new = group.brokers[group.master_index() or 0]
            assert new is not None
            send_until_ok(producer, TOPIC, b"after 0")
            acknowledged.append(b"after 0")
            for i in range(1, 20):
                producer.send(Message(TOPIC, b"after %d" % i))
                acknowledged.append(b"after %d" % i)
            assert wait_until(lambda: _table_holds(new.address, len(acknowledged)), UNTIL_S), _why_not(new)
        table = DeltaTable(table_uri(str(tables), TOPIC)).to_pyarrow_table(columns=["queueId", "queueOffset", "body"])
        rows = table.to_pylist()
        for q in range(QUEUES):
            offsets = sorted(r["queueOffset"] for r in rows if r["queueId"] == q)
            assert offsets == list(range(len(offsets))), f"queue {q}: a duplicate or a gap"
        assert set(acknowledged) <= {r["body"] for r in rows}


def test_a_master_writes_only_what_its_replica_confirmed(tmp_path: Path) -> None:
    """A message the replica has not confirmed (it is stopped, and stays in the SyncStateSet) is stored on the
    master but kept out of the table, so a failover could not leave the table ahead of the new master."""
    tables = tmp_path / "tables"
    settings = ("--set", f"tableTopicRoot={tables}", "--set", "tableTopicCommitIntervalMs=100")
    settings += ("--set", "haMaxTimeSlaveNotCatchup=600000")  # the stopped replica stays in the SyncStateSet
    with ControllerGroup(tmp_path, 2, settings) as group:
        assert wait_until(group.all_in_sync, UNTIL_S), "the group never had a master with its replica in sync"
        master_index = group.master_index()
        assert master_index is not None
        master, replica = group.brokers[master_index], group.brokers[1 - master_index]
        assert master is not None and replica is not None
        _create_table_topic(master.address)
        assert send(master.address, TOPIC, b"confirmed").code == ResponseCode.SUCCESS
        assert wait_until(lambda: _table_holds(master.address, 1), UNTIL_S), _status(master.address)
        os.kill(replica.process.pid, signal.SIGSTOP)
        try:
            unconfirmed = send(master.address, TOPIC, b"unconfirmed")
            assert unconfirmed.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, unconfirmed.remark

            def held_back() -> bool:  # the writer saw the message a while ago and left it out
                status = _status(master.address)
                return status is not None and any(q.lag_messages == 1 and q.lag_seconds >= 1 for q in status.queues)

            assert wait_until(held_back, UNTIL_S), _status(master.address)
            assert _status(master.address).state == "ok"  # type: ignore[union-attr]
        finally:
            os.kill(replica.process.pid, signal.SIGCONT)
        assert wait_until(lambda: _table_holds(master.address, 2), UNTIL_S), "the table never took it"
