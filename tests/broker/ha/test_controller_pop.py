"""POP state across a controller failover, as real processes.

A master pops three messages over remoting (RocketMQ 5's POP_MESSAGE), acks one and makes one
invisible for two minutes; it is SIGKILLed. The replica the controller promotes holds the
checkpoints, the ack, the changed invisible time and the pop offsets (the revive log): it
redelivers the one left in flight, from the retry topic with its attempt + 1, once its deadline
passed; it takes an ack with the handle the dead master gave; nothing acked comes back. A FIFO
group's unacked messages come back in place, each counted as delivered once before.
"""

from __future__ import annotations

import time
from pathlib import Path

from sparkmq import Message, Producer, SparkmqError
from sparkmq.message.properties import SHARDING_KEY
from sparkmq.message.record import StoredMessage, iter_records
from sparkmq.protocol import RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.pop_headers import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    PopMessageRequestHeader,
)
from support.controller_group import GROUP, UNTIL_S, ControllerGroup, ask
from support.processes import wait_until

CONSUMER, FIFO, TOPIC = "CID_CTL_POP", "CID_CTL_POP_FIFO", "CtlPop"
INVISIBLE_MS = 3_000


def sent(producer: Producer, message: Message) -> bool:
    try:
        producer.send(message)
    except SparkmqError:
        return False
    return True


def pop(address: str, poll_ms: int, group: str = CONSUMER) -> RemotingCommand:
    born = int(time.time() * 1000)
    header = PopMessageRequestHeader(group, TOPIC, -1, 8, INVISIBLE_MS, poll_ms, born, 0, "TAG", "*", group == FIFO)
    return ask(address, RequestCode.POP_MESSAGE, header.to_fields())


def fifo_counts(address: str, bodies: dict[bytes, int]) -> bool:
    """One FIFO pop: ``bodies`` gets each message's earlier deliveries (``orderCountInfo``)."""
    answer = pop(address, 500, FIFO)
    if answer.code == ResponseCode.SUCCESS:
        entries = [e.split(" ") for e in answer.ext_fields["orderCountInfo"].split(";")]
        counts = {where: int(count) for _kind, where, count in entries if where.startswith("qo")}
        for m in iter_records(answer.body):
            bodies[bytes(m.body)] = counts[f"qo{m.queue_id}%{m.queue_offset}"]
    return len(bodies) == 3


def handle(answer: RemotingCommand, message: StoredMessage) -> str:
    """The ``extraInfo`` a 5.x client builds for ``message`` of a POP answer (7 fields)."""
    kind = "1" if message.topic.startswith("%RETRY%") else "0"
    f = answer.ext_fields
    return f"{message.queue_offset} {f['popTime']} {f['invisibleTime']} 0 {kind} {GROUP} {message.queue_id}"


def ack(address: str, message: StoredMessage, extra_info: str) -> RemotingCommand:
    fields = AckMessageRequestHeader(CONSUMER, TOPIC, message.queue_id, extra_info, message.queue_offset).to_fields()
    return ask(address, RequestCode.ACK_MESSAGE, fields)


def test_the_promoted_replica_redelivers_what_the_killed_master_had_in_flight(tmp_path: Path) -> None:
    with ControllerGroup(tmp_path, 2) as group:
        assert wait_until(group.all_in_sync, UNTIL_S), "the group never had both brokers in sync"
        assert group.namesrv is not None
        with Producer("PID_CTL_POP", group.namesrv.address) as producer:
            for body in (b"acked", b"in flight", b"extended"):  # each its own FIFO message group
                message = Message(TOPIC, body, properties={SHARDING_KEY: body.decode()})
                assert wait_until(lambda m=message: sent(producer, m), UNTIL_S), "sends never succeeded"
        old = group.master_index()
        assert old is not None
        master = group.brokers[old]
        assert master is not None
        popped: dict[bytes, tuple[StoredMessage, str]] = {}

        def pop_all() -> bool:
            answer = pop(master.address, 500)
            if answer.code == ResponseCode.SUCCESS:
                popped.update({bytes(m.body): (m, handle(answer, m)) for m in iter_records(answer.body)})
            return len(popped) == 3

        assert wait_until(pop_all, UNTIL_S), f"the master popped {sorted(popped)} only"
        message, info = popped[b"acked"]
        assert ack(master.address, message, info).code == ResponseCode.SUCCESS
        message, info = popped[b"extended"]
        fields = ChangeInvisibleTimeRequestHeader(
            CONSUMER, TOPIC, message.queue_id, info, message.queue_offset, 120_000
        ).to_fields()
        changed = ask(master.address, RequestCode.CHANGE_MESSAGE_INVISIBLETIME, fields)
        assert changed.code == ResponseCode.SUCCESS, changed.remark
        extended = info.split(" ")
        extended[1:3] = changed.ext_fields["popTime"], changed.ext_fields["invisibleTime"]
        first: dict[bytes, int] = {}
        assert wait_until(lambda: fifo_counts(master.address, first), UNTIL_S), f"FIFO popped {first} only"
        assert set(first.values()) == {0}

        group.kill(old)
        assert wait_until(lambda: group.master_index() not in (None, old), UNTIL_S), "no master was elected"
        new = group.master_index()
        assert new is not None
        successor = group.brokers[new]
        assert successor is not None
        answers: list[RemotingCommand] = []

        def revived_one() -> bool:
            answers.append(pop(successor.address, 1000))
            return answers[-1].code == ResponseCode.SUCCESS

        assert wait_until(revived_one, UNTIL_S), f"nothing was redelivered: {answers[-1].remark}"
        records = list(iter_records(answers[-1].body))
        got = [(bytes(m.body), m.topic, m.reconsume_times) for m in records]
        assert got == [(b"in flight", f"%RETRY%{CONSUMER}", 1)], "not only the unacked one, at its second attempt"
        revived = records[0]

        assert ack(successor.address, message, " ".join(extended)).code == ResponseCode.SUCCESS
        assert ack(successor.address, revived, handle(answers[-1], revived)).code == ResponseCode.SUCCESS
        assert pop(successor.address, 1000).code == ResponseCode.PULL_NOT_FOUND, "an acked message came back"
        again: dict[bytes, int] = {}
        assert wait_until(lambda: fifo_counts(successor.address, again), UNTIL_S), f"FIFO redelivered {again} only"
        assert again == {b"acked": 1, b"in flight": 1, b"extended": 1}
