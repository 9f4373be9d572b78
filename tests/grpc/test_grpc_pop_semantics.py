"""POP selection over gRPC: FIFO locks per message group, SQL92 filters, a retried receive's attempt id.

One SYNC-flush broker with its gRPC endpoint and ``enablePropertyFilter`` for the module; the real
RocketMQ 5 Python client (rmq5_client.py) where it can show the behaviour, raw calls with the published
stubs for the attempt id (the client sends the same one only after its own timeout). The FIFO kill -9
case restarts the broker on the same store.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc

from support.grpc_broker import GrpcBroker, start_broker
from support.processes import wait_until
from support.rocketmq5 import all_sent, finished, name_maker, of, require_rmq5_python, run5

names = name_maker("PopSem")
SQL_FILTER = ("--set", "enablePropertyFilter=true")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GrpcBroker]:
    require_rmq5_python()
    store = tmp_path_factory.mktemp("grpc-pop-semantics")
    cluster = GrpcBroker(store, None, start_broker(store, None, 0, *SQL_FILTER))
    try:
        yield cluster
    finally:
        cluster.broker.stop()


def client(home: Path, *args: str) -> list[dict[str, object]]:
    return finished(run5(home, *args))


def produce(broker: GrpcBroker, home: Path, topic: str, count: int, *extra: str) -> list[dict[str, object]]:
    return all_sent(client(home, "produce", broker.endpoint, topic, str(count), *extra), count)


def fifo_topic(broker: GrpcBroker, label: str) -> tuple[str, str]:
    topic, group = names(label)
    broker.create_topic(topic, queues=1, message_type="FIFO")
    broker.create_group(group, orderly=True)
    return topic, group


def test_fifo_message_groups_of_one_queue_do_not_wait_for_each_other(broker: GrpcBroker, tmp_path: Path) -> None:
    topic, group = fifo_topic(broker, "Groups")
    sent = produce(broker, tmp_path, topic, 4, "--group-key", "A,A,B,B")  # m0, m1 of A; m2, m3 of B
    # m0's first delivery is left to expire (2 s): m2 and m3 come meanwhile, m1 only after m0 is acked
    records = client(
        tmp_path, "receive", broker.endpoint, topic, group, "5", "--invisible", "2", "--hold-first-of", "A"
    )
    got = [(r["body"], r["group_key"], r["attempt"]) for r in of(records, "received")]
    assert got == [("m0", "A", 1), ("m2", "B", 1), ("m3", "B", 1), ("m0", "A", 2), ("m1", "A", 1)], got
    assert {r["id"] for r in of(records, "acked")} == {s["id"] for s in sent}
    assert wait_until(lambda: broker.committed(group, topic, 0) == 4)


def test_fifo_waiting_messages_and_attempts_survive_kill_9(broker: GrpcBroker, tmp_path: Path) -> None:
    topic, group = fifo_topic(broker, "Crash")
    produce(broker, tmp_path, topic, 3, "--group-key", "A,A,B")  # m0, m1 of A; m2 of B
    receive = ("receive", broker.endpoint, topic, group)
    first = of(client(tmp_path, *receive, "2", "--invisible", "2", "--hold-first-of", "A"), "received")
    assert [(r["body"], r["attempt"]) for r in first] == [("m0", 1), ("m2", 1)]
    # m0 in flight, m1 waiting behind it, m2 acked: the group's offset stays at m0
    assert broker.committed(group, topic, 0) == 0
    port = int(broker.endpoint.rsplit(":", 1)[1])
    broker.broker.kill()
    broker.broker = start_broker(broker.store_dir, None, port, *SQL_FILTER)
    again = of(client(tmp_path, *receive, "2"), "received")
    assert [(r["body"], r["attempt"]) for r in again] == [("m0", 2), ("m1", 1)]
    assert wait_until(lambda: broker.committed(group, topic, 0) == 3)


def test_sql92_filter_skips_what_does_not_match(broker: GrpcBroker, tmp_path: Path) -> None:
    topic, group = names("Sql")
    broker.create_topic(topic, queues=1)
    produce(broker, tmp_path, topic, 4, "--prop", "n={i}", "--prop", "region=eu")
    records = client(tmp_path, "receive", broker.endpoint, topic, group, "2", "--sql", "n >= 2 AND region = 'eu'")
    assert sorted(r["body"] for r in of(records, "received")) == ["m2", "m3"]
    # the two that did not match count as consumed: the group's offset is past all four
    assert wait_until(lambda: broker.committed(group, topic, 0) == 4)


def receive_raw(
    stub: service_pb2_grpc.MessagingServiceStub, topic: str, group: str, attempt_id: str = "", sql: str = ""
) -> tuple[int, list[pb.Message]]:
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
        batch_size=1,
        attempt_id=attempt_id,
    )
    if sql:
        request.filter_expression.CopyFrom(pb.FilterExpression(type=pb.SQL, expression=sql))
    request.invisible_duration.FromSeconds(30)
    request.long_polling_timeout.FromSeconds(1)
    answers = list(stub.ReceiveMessage(request, timeout=10))
    code = next(a.status.code for a in answers if a.HasField("status"))
    return code, [a.message for a in answers if a.HasField("message")]


def test_a_retried_receive_with_the_same_attempt_id_gets_the_same_message(broker: GrpcBroker, tmp_path: Path) -> None:
    topic, group = names("Attempt")
    broker.create_topic(topic, queues=1)
    sent = produce(broker, tmp_path, topic, 2)
    with grpc.insecure_channel(broker.endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        _, [first] = receive_raw(stub, topic, group, "attempt-1")
        _, [retried] = receive_raw(stub, topic, group, "attempt-1")
        _, [other] = receive_raw(stub, topic, group, "attempt-2")
        assert first.system_properties.message_id == retried.system_properties.message_id == sent[0]["id"]
        assert other.system_properties.message_id == sent[1]["id"]
        entry = spb.AckMessageEntry(
            message_id=retried.system_properties.message_id, receipt_handle=retried.system_properties.receipt_handle
        )
        ack = stub.AckMessage(
            spb.AckMessageRequest(group=pb.Resource(name=group), topic=pb.Resource(name=topic), entries=[entry])
        )
        assert ack.status.code == pb.OK, ack.status.message
        # acked: the same attempt id has nothing left to answer again, so it pops anew (nothing is left)
        code, none = receive_raw(stub, topic, group, "attempt-1")
        assert (code, none) == (pb.MESSAGE_NOT_FOUND, [])
        code, bad = receive_raw(stub, topic, group, sql="n >")
        assert (code, bad) == (pb.ILLEGAL_FILTER_EXPRESSION, [])
