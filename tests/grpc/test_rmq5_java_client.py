"""The real RocketMQ 5 Java client (rocketmq-client-java 5.0.7, gRPC) against the broker's gRPC endpoint.

One NameServer and one SYNC-flush broker per module (``grpc_broker``); each scenario is a small Java
main of ``references/rocketmq5-runner`` (``make references``) on its own topic and group.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support.grpc_broker import GrpcBroker
from support.rocketmq5 import all_sent, check_transactions, finished, name_maker, of
from support.rocketmq5_java import require_java5, run_java5

CLIENT_TIMEOUT_S = 90.0
names = name_maker("Java5")


@pytest.fixture(scope="module", autouse=True)
def java5() -> None:
    require_java5()


def java(home: Path, main: str, *args: str) -> list[dict[str, object]]:
    return finished(run_java5(home, main, *args), CLIENT_TIMEOUT_S)


def produce(grpc_broker: GrpcBroker, home: Path, topic: str, count: int, *extra: str) -> list[dict[str, object]]:
    return all_sent(java(home, "Rmq5Produce", grpc_broker.endpoint, topic, str(count), *extra), count)


def test_producer_and_simple_consumer_receive_ack(grpc_broker: GrpcBroker, tmp_path: Path) -> None:
    topic, group = names("Simple")
    grpc_broker.create_topic(topic, queues=2)
    sent = produce(grpc_broker, tmp_path, topic, 4, "--tag", "TagJ")
    records = java(tmp_path, "Rmq5Receive", grpc_broker.endpoint, topic, group, "4")
    grpc_broker.assert_received_and_acked(group, topic, sent, records, "TagJ")


def test_change_invisible_duration(grpc_broker: GrpcBroker, tmp_path: Path) -> None:
    topic, group = names("Change")
    grpc_broker.create_topic(topic, queues=1)
    [sent] = grpc_broker.send(topic, 1)
    receive = ("Rmq5Receive", grpc_broker.endpoint, topic, group, "2", "--invisible", "60", "--change-to", "1")
    records = java(tmp_path, *receive)
    assert [(r["id"], r["attempt"]) for r in of(records, "received")] == [(sent["id"], 1), (sent["id"], 2)]


def test_push_consumer_failure_is_retried(grpc_broker: GrpcBroker, tmp_path: Path) -> None:
    topic, group = names("Push")
    grpc_broker.create_topic(topic, queues=2)
    sent = grpc_broker.send(topic, 3)
    records = java(tmp_path, "Rmq5Push", grpc_broker.endpoint, topic, group, "3", "--fail-first", "1")
    ok = [r for r in of(records, "received") if not r["failed"]]
    assert sorted(r["id"] for r in ok) == sorted(s["id"] for s in sent)
    assert {r["attempt"] for r in ok} == {2}


def test_fifo_producer_and_push_consumer_keep_a_message_group_in_order(grpc_broker: GrpcBroker, tmp_path: Path) -> None:
    topic, group = names("Fifo")
    grpc_broker.create_topic(topic, queues=4, message_type="FIFO")
    grpc_broker.create_group(group, orderly=True)
    sent = produce(grpc_broker, tmp_path, topic, 6, "--group-key", "order-j")
    received = of(java(tmp_path, "Rmq5Push", grpc_broker.endpoint, topic, group, "6"), "received")
    assert [r["body"] for r in received] == [s["body"] for s in sent]
    assert {r["group_key"] for r in received} == {"order-j"}


def test_delay_message_is_not_delivered_before_its_time(grpc_broker: GrpcBroker, tmp_path: Path) -> None:
    topic, group = names("Delay")
    grpc_broker.create_topic(topic, queues=1, message_type="DELAY")
    [sent] = produce(grpc_broker, tmp_path, topic, 1, "--delay-ms", "1000")
    [received] = of(java(tmp_path, "Rmq5Receive", grpc_broker.endpoint, topic, group, "1"), "received")
    assert received["id"] == sent["id"]
    assert float(received["at"]) >= float(sent["sent_at"]) + 1.0  # the delivery time is a lower bound


def test_transactions_commit_rollback_and_check(grpc_broker: GrpcBroker, tmp_path: Path) -> None:
    topic, group = names("Tx")
    grpc_broker.create_topic(topic, queues=2, message_type="TRANSACTION")
    producer = run_java5(tmp_path, "Rmq5Transact", grpc_broker.endpoint, topic)
    check_transactions(producer, lambda: java(tmp_path, "Rmq5Receive", grpc_broker.endpoint, topic, group, "2"))
