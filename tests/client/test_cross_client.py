"""sparkmq's clients and the real C++ RocketMQ client (PyPI ``rocketmq`` 0.4.4) on one sparkmq broker.

What the C++ producer sends (sync, compressed, batch, orderly), sparkmq's PushConsumer receives
byte for byte with tags, keys and properties; what sparkmq's Producer sends (single, compressed,
batch, ordered), the C++ PushConsumer receives the same way. The C++ side runs in its own
virtualenv through ``tests/interop/cpp_client.py`` (see ``support.rocketmq_cpp``).

The C++ wrapper passes bodies as C strings, so bodies crossing to or from it are text (UTF-8,
non-ASCII included) without NUL bytes; arbitrary binary bodies are covered between sparkmq's own
clients in ``test_produce_consume.py``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkmq.client import Message, ReceivedMessage, select_by_hash
from sparkmq.message import layout as L
from sparkmq.protocol.bodies import MessageQueue
from support.client_harness import Inbox
from support.rocketmq_cpp import CppClientRun

CPP_TIMEOUT_S = 60.0
COLORS = ("red", "green", "blue")


@pytest.fixture
def cpp_runs(cluster, tmp_path: Path) -> Iterator[Any]:
    """Start C++ driver subprocesses against the module's NameServer; all are reaped at teardown."""
    runs: list[CppClientRun] = []

    def start(command: str, topic: str, group: str, *options: str) -> CppClientRun:
        run = CppClientRun.start(
            tmp_path / "home", command, "--namesrv", cluster.ns, "--topic", topic, "--group", group, *options
        )
        runs.append(run)
        return run

    yield start
    for run in runs:
        run.kill()


def sent_records(run: CppClientRun) -> list[dict[str, Any]]:
    records = [r for r in run.finish(CPP_TIMEOUT_S) if r["event"] == "sent"]
    assert records and all(r["status"] == 0 for r in records), records[:3]
    return records


def cpp_body(prefix: str, index: int, pad: int = 0) -> bytes:
    """The body ``cpp_client.py`` builds for message ``index``."""
    return (f"{prefix}-body-{index}" + "." * pad).encode("utf-8")


def test_what_the_cpp_producer_sends_sparkmq_push_consumers_receive_byte_exact(
    cluster, clients, group, cpp_runs
) -> None:
    topic = cluster.topic(queues=4)
    plain = sent_records(cpp_runs("produce", topic, "PID_cpp", "--count", "60", "--prefix", "plain-ü✓"))
    packed = sent_records(cpp_runs("produce", topic, "PID_cpp", "--count", "8", "--prefix", "zip", "--pad", "6000"))
    batches = sent_records(
        cpp_runs("produce-batch", topic, "PID_cpp", "--batches", "3", "--size", "10", "--prefix", "batch")
    )
    ordered = sent_records(
        cpp_runs("produce-orderly", topic, "PID_cpp", "--count", "80", "--keys", "4", "--prefix", "ord")
    )
    expected = 60 + 8 + 30 + 80

    inbox = Inbox()
    clients.push(group, cluster.ns, topic, inbox.listener("concurrent"))
    in_order = Inbox()
    clients.push(group + "_orderly", cluster.ns, topic, in_order.listener("orderly"), orderly=True)
    inbox.wait_distinct(expected, 30, topic)
    in_order.wait_distinct(expected, 30, topic)

    got = {(r.message.queue.queue_id, r.message.queue_offset): r.message for r in inbox.snapshot(topic=topic)}
    assert len(inbox.snapshot(topic=topic)) == expected == len(got)  # each exactly once
    by_body: dict[bytes, ReceivedMessage] = {m.body: m for m in got.values()}
    for prefix, records, pad in (("plain-ü✓", plain, 0), ("zip", packed, 6000), ("ord", ordered, 0)):
        for record in records:
            message = by_body[cpp_body(prefix, record["index"], pad)]
            assert (message.queue_offset, message.msg_id) == (record["offset"], record["msg_id"])
            assert_fields(message, record["index"], record.get("key"))
            assert bool(message.sys_flag & L.COMPRESSED_FLAG) == (pad > 0)
    for record in batches:
        items = [by_body[cpp_body("batch", record["first"] + i)] for i in range(record["size"])]
        assert len({m.queue for m in items}) == 1
        assert [m.queue_offset for m in items] == list(range(record["offset"], record["offset"] + record["size"]))
        for i, message in enumerate(items):
            assert_fields(message, record["first"] + i)

    per_key: dict[str, list[int]] = defaultdict(list)
    for receipt in in_order.snapshot(topic=topic):
        if receipt.message.body.startswith(b"ord-"):
            per_key[receipt.message.keys[0]].append(int(receipt.message.properties["seq"]))
    assert sorted(per_key) == [f"order-{k}" for k in range(4)]
    for key, seqs in per_key.items():
        assert seqs == sorted(seqs) and len(seqs) == 20, key  # the orderly consumer kept each key's send order


def assert_fields(message: ReceivedMessage, index: int, key: str | None = None) -> None:
    assert message.tags == f"Tag{index % 3}"
    assert message.keys == [key or f"key-{index}"]
    assert message.properties["color"] == COLORS[index % 3] and message.properties["seq"] == str(index)
    assert message.reconsume_times == 0


def test_what_sparkmq_sends_the_cpp_push_consumer_receives_intact(cluster, clients, group, cpp_runs) -> None:
    topic = cluster.topic(queues=4)
    producer = clients.producer("PID_sparkmq", cluster.ns)
    bodies: dict[int, str] = {}

    def build(index: int, body: str, key: str | None = None) -> Message:
        bodies[index] = body
        return Message(
            topic,
            body,
            tags=f"Tag{index % 3}",
            keys=key or f"key-{index}",
            properties={"color": COLORS[index % 3], "seq": str(index)},
        )

    ids: dict[int, str] = {}
    for i in range(40):
        ids[i] = producer.send(build(i, f"sparkmq-{i} ünïcødé ✓ 消息")).msg_id
    for i in range(40, 45):  # ≥ 4 KiB: sparkmq compresses, the C++ consumer must inflate
        ids[i] = producer.send(build(i, f"big-{i}-" + "✓" * 3000)).msg_id
    batch = producer.send_batch([build(i, f"batch-{i}") for i in range(45, 65)])
    ids.update(zip(range(45, 65), batch.msg_id.split(","), strict=True))
    for i in range(65, 105):
        key = f"order-{i % 3}"
        ids[i] = producer.send(build(i, f"ordered-{i}", key), selector=select_by_hash, arg=key).msg_id

    run = cpp_runs("push-consume", topic, group, "--count", str(len(bodies)), "--deadline", "45", "--linger", "1")
    records = [r for r in run.finish(CPP_TIMEOUT_S) if r["event"] == "received"]

    positions = [(r["queue_id"], r["queue_offset"]) for r in records]
    assert len(positions) == len(set(positions)) == len(bodies)  # every message exactly once
    for record in records:
        index = int(record["properties"]["seq"])
        assert record["body"] == bodies[index]
        assert record["id"] == ids[index]
        assert record["tags"] == f"Tag{index % 3}" and record["properties"]["color"] == COLORS[index % 3]
        assert record["keys"] == (f"order-{index % 3}" if index >= 65 else f"key-{index}")
        assert record["reconsume_times"] == 0
    # The C++ consumer committed what it consumed: sparkmq's pull consumer sees it.
    reader = clients.pull(group, cluster.ns, auto_commit_interval_s=None)
    queues = [MessageQueue(topic, "broker-a", q) for q in range(4)]
    assert [reader.committed(q) for q in queues] == [reader.max_offset(q) for q in queues]
