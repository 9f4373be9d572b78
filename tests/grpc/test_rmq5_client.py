"""The real RocketMQ 5 Python client (rocketmq-python-client 5.1.2, gRPC) against the broker's gRPC endpoint.

One NameServer and one SYNC-flush broker (enableGrpcServer) per module; each scenario runs the
client in a subprocess (``rmq5_client.py``) on its own topic and group. The last test kills the
broker with SIGKILL and restarts it on the same store.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from sparkmq import Message, Producer, PullConsumer
from sparkmq.protocol.codes import RequestCode, ResponseCode
from support.grpc_broker import GrpcBroker
from support.processes import wait_until
from support.rocketmq5 import all_sent, check_transactions, finished, name_maker, of, require_rmq5_python, run5

names = name_maker("Grpc")


@pytest.fixture(scope="module", autouse=True)
def rmq5_python() -> None:
    require_rmq5_python()


def client(home: Path, *args: str) -> list[dict[str, object]]:
    return finished(run5(home, *args))


def produce(grpc_broker: GrpcBroker, home: Path, topic: str, count: int, *extra: str) -> list[dict[str, object]]:
    return all_sent(client(home, "produce", grpc_broker.endpoint, topic, str(count), *extra), count)


def test_producer_and_simple_consumer_receive_ack_and_progress(grpc_broker: GrpcBroker, tmp_path: Path) -> None:
    topic, group = names("Simple")
    grpc_broker.create_topic(topic, queues=2)
    sent = produce(grpc_broker, tmp_path, topic, 6, "--tag", "TagA")
    records = client(tmp_path, "receive", grpc_broker.endpoint, topic, group, "6")
    grpc_broker.assert_received_and_acked(group, topic, sent, records, "TagA")


def test_unacked_message_is_redelivered_then_goes_to_the_dlq(grpc_broker: GrpcBroker, tmp_path: Path) -> None:
    topic, group = names("Redeliver")
    grpc_broker.create_topic(topic, queues=1)
    grpc_broker.create_group(group, retry_max_times=1)
    [sent] = grpc_broker.send(topic, 1)
    records = client(tmp_path, "receive", grpc_broker.endpoint, topic, group, "2", "--invisible", "1", "--no-ack")
    received = of(records, "received")
    assert [(r["id"], r["attempt"], r["topic"]) for r in received] == [(sent["id"], 1, topic), (sent["id"], 2, topic)]
    assert wait_until(lambda: grpc_broker.max_offset(f"%DLQ%{group}") == 1, timeout_s=15)


def test_change_invisible_duration_brings_the_message_back_sooner(grpc_broker: GrpcBroker, tmp_path: Path) -> None:
    topic, group = names("Change")
    grpc_broker.create_topic(topic, queues=1)
    [sent] = grpc_broker.send(topic, 1)
    # received with 60 s of invisibility, then changed to 1 s: it comes back well before the 60 s
    records = client(
        tmp_path, "receive", grpc_broker.endpoint, topic, group, "2", "--invisible", "60", "--change-to", "1"
    )
    assert [(r["id"], r["attempt"]) for r in of(records, "received")] == [(sent["id"], 1), (sent["id"], 2)]
    assert len(of(records, "changed")) == 2


def test_push_consumer_failure_is_retried(grpc_broker: GrpcBroker, tmp_path: Path) -> None:
    topic, group = names("Push")
    grpc_broker.create_topic(topic, queues=2)
    sent = grpc_broker.send(topic, 3)
    records = client(tmp_path, "push", grpc_broker.endpoint, topic, group, "3", "--fail-first", "1")
    received = of(records, "received")
    ok = [r for r in received if not r["failed"]]
    assert sorted(r["id"] for r in ok) == sorted(s["id"] for s in sent)
    assert {r["attempt"] for r in ok} == {2}
    assert of(records, "done")[0]["count"] == 3


def test_push_consumer_messages_are_auto_renewed_while_it_works(grpc_broker: GrpcBroker, tmp_path: Path) -> None:
    topic, group = names("Renew")
    grpc_broker.create_topic(topic, queues=1)
    sent = grpc_broker.send(topic, 2)
    # each message takes 3 s to consume, the invisible time is 2 s: only the renewals keep it from coming back
    records = client(tmp_path, "push", grpc_broker.endpoint, topic, group, "2", "--hold-s", "3")
    received = of(records, "received")
    assert sorted((r["id"], r["attempt"]) for r in received) == sorted((s["id"], 1) for s in sent)
    assert grpc_broker.max_offset(f"%RETRY%{group}") <= 0


def test_fifo_group_receives_a_message_group_in_order(grpc_broker: GrpcBroker, tmp_path: Path) -> None:
    topic, group = names("Fifo")
    grpc_broker.create_topic(topic, queues=4, message_type="FIFO")
    grpc_broker.create_group(group, orderly=True)
    sent = produce(grpc_broker, tmp_path, topic, 8, "--group-key", "order-1")
    records = client(tmp_path, "push", grpc_broker.endpoint, topic, group, "8")
    received = of(records, "received")
    assert [r["body"] for r in received] == [s["body"] for s in sent]
    assert {r["group_key"] for r in received} == {"order-1"}


def test_delay_message_is_not_delivered_before_its_time(grpc_broker: GrpcBroker, tmp_path: Path) -> None:
    topic, group = names("Delay")
    grpc_broker.create_topic(topic, queues=1)
    [sent] = produce(grpc_broker, tmp_path, topic, 1, "--delay-ms", "1000")
    [received] = of(client(tmp_path, "receive", grpc_broker.endpoint, topic, group, "1"), "received")
    assert received["id"] == sent["id"]
    # the delivery time is a lower bound (the send's answer may come back after the message was stored)
    assert float(received["at"]) >= float(sent["asked_at"]) + 1.0


def test_transactions_commit_rollback_and_check(grpc_broker: GrpcBroker, tmp_path: Path) -> None:
    topic, group = names("Tx")
    grpc_broker.create_topic(topic, queues=2, message_type="TRANSACTION")
    producer = run5(tmp_path, "transact", grpc_broker.endpoint, topic)
    check_transactions(producer, lambda: client(tmp_path, "receive", grpc_broker.endpoint, topic, group, "2"))


def test_4x_and_5x_clients_share_a_topic(grpc_broker: GrpcBroker, tmp_path: Path) -> None:
    topic, group = names("Shared")
    grpc_broker.create_topic(topic, queues=2)
    assert wait_until(lambda: _routable(grpc_broker, topic), timeout_s=40)
    assert grpc_broker.namesrv is not None
    with Producer("PID_grpc_shared", grpc_broker.namesrv.address) as producer:
        old = [producer.send(Message(topic, f"from-4x-{i}", tags="T")).msg_id for i in range(3)]
    new = produce(grpc_broker, tmp_path, topic, 2, "--prefix", "from-5x-")
    received = of(client(tmp_path, "receive", grpc_broker.endpoint, topic, group, "5"), "received")
    assert sorted(r["body"] for r in received) == sorted(
        [f"from-4x-{i}" for i in range(3)] + ["from-5x-0", "from-5x-1"]
    )
    assert len(old) == 3
    with PullConsumer("CID_grpc_shared_4x", grpc_broker.namesrv.address) as consumer:
        queues = consumer.queues_of(topic)
        consumer.assign(queues)
        for queue in queues:
            consumer.seek_to_begin(queue)
        bodies: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(bodies) < 5 and time.monotonic() < deadline:
            bodies += [bytes(m.body) for m in consumer.poll(timeout_s=1.0)]
    assert {b.decode() for b in bodies} >= {s["body"] for s in new}


def _routable(grpc_broker: GrpcBroker, topic: str) -> bool:
    assert grpc_broker.namesrv is not None
    namesrv = grpc_broker.namesrv.address
    code, _, _, body = grpc_broker.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, address=namesrv, topic=topic)
    return code == ResponseCode.SUCCESS and bool(json.loads(body or b"{}").get("queueDatas"))


def test_kill_9_redelivers_unacked_pops_but_not_acked_ones(grpc_broker: GrpcBroker, tmp_path: Path) -> None:
    topic, group = names("Crash")
    grpc_broker.create_topic(topic, queues=1)
    sent = produce(grpc_broker, tmp_path, topic, 4)
    records = client(
        tmp_path, "receive", grpc_broker.endpoint, topic, group, "4", "--invisible", "2", "--ack-first", "2"
    )
    acked = {r["id"] for r in of(records, "acked")}
    assert len(acked) == 2 and {r["id"] for r in of(records, "received")} == {s["id"] for s in sent}
    port = int(grpc_broker.endpoint.rsplit(":", 1)[1])
    grpc_broker.broker.kill()
    grpc_broker.start(grpc_port=port)
    again = of(client(tmp_path, "receive", grpc_broker.endpoint, topic, group, "2"), "received")
    assert {r["id"] for r in again} == {s["id"] for s in sent} - acked
    assert {r["attempt"] for r in again} == {2}
    # nothing else is pending: the topic's queue is consumed to its end, the retry copies too
    assert wait_until(lambda: grpc_broker.committed(group, topic, 0) == 4)
    assert wait_until(lambda: grpc_broker.committed(group, f"%RETRY%{group}", 0) == 2)


def test_fifo_attempts_survive_kill_9_then_the_message_goes_to_the_dlq(grpc_broker: GrpcBroker, tmp_path: Path) -> None:
    topic, group = names("FifoDlq")
    grpc_broker.create_topic(topic, queues=1, message_type="FIFO")
    grpc_broker.create_group(group, retry_max_times=2, orderly=True)
    [sent] = produce(grpc_broker, tmp_path, topic, 1, "--group-key", "order-9")
    receive = ("receive", grpc_broker.endpoint, topic, group)
    first = of(client(tmp_path, *receive, "2", "--invisible", "1", "--no-ack"), "received")
    assert [(r["id"], r["attempt"]) for r in first] == [(sent["id"], 1), (sent["id"], 2)]
    port = int(grpc_broker.endpoint.rsplit(":", 1)[1])
    grpc_broker.broker.kill()
    grpc_broker.start(grpc_port=port)
    # the first expiry was journaled: after the restart the message comes back as its third and last attempt
    last = of(client(tmp_path, *receive, "1", "--invisible", "1", "--no-ack"), "received")
    assert [(r["id"], r["attempt"]) for r in last] == [(sent["id"], 3)]
    assert wait_until(lambda: grpc_broker.max_offset(f"%DLQ%{group}") == 1, timeout_s=15)
    assert of(client(tmp_path, *receive, "1", "--timeout", "3"), "received") == []
