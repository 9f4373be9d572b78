"""The real C++ RocketMQ client (PyPI ``rocketmq`` 0.4.4, rocketmq-client-cpp 1.2.3) against sparkmq.

Each test drives ``cpp_client.py`` subprocesses (see tests/support/rocketmq_cpp.py) against the
module's NameServer + broker, on a fresh topic, and checks what the client saw against the broker.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from typing import Any

from sparkmq.client.admin_ext import AdminExt
from support.rocketmq_cpp import CppClientRun

QUEUES = 4  # the C++ producer asks for defaultTopicQueueNums=4 when the broker auto-creates a topic
Record = dict[str, Any]


def sent(records: list[Record]) -> list[Record]:
    results = [record for record in records if record["event"] == "sent"]
    assert all(result["status"] == 0 for result in results), [r for r in results if r["status"] != 0][:3]
    return results


def received(records: list[Record]) -> list[Record]:
    return [record for record in records if record["event"] == "received"]


def assert_intact(message: Record, topic: str, *, prefix: str = "m", pad: int = 0, key: str | None = None) -> int:
    """Every field the producer set came back unchanged; returns the message's index."""
    index = int(message["properties"]["seq"])
    assert message["topic"] == topic
    assert message["body"] == f"{prefix}-body-{index}" + "." * pad
    assert message["tags"] == f"Tag{index % 3}"
    assert message["keys"] == (key if key is not None else f"key-{index}")
    assert message["properties"]["color"] == ("red", "green", "blue")[index % 3]
    assert message["reconsume_times"] == 0
    return index


def by_queue(messages: list[Record]) -> dict[int, list[Record]]:
    queues: dict[int, list[Record]] = defaultdict(list)
    for message in messages:
        queues[message["queue_id"]].append(message)
    return {queue: sorted(items, key=lambda m: m["queue_offset"]) for queue, items in queues.items()}


def bodies(run: CppClientRun, prefix: str) -> list[str]:
    return [m["body"] for m in run.events("received") if m["body"].startswith(prefix + "-")]


def test_send_sync_thousand_messages_gets_dense_queue_offsets(cluster, cpp, topic) -> None:
    results = sent(cpp.run("produce", topic=topic, group=f"PID_{topic}", count=1000))

    assert [r["index"] for r in results] == list(range(1000))
    assert len({r["msg_id"] for r in results}) == 1000 and all(r["msg_id"] for r in results)
    maxima = [cluster.max_offset(topic, q) for q in range(QUEUES)]
    assert [cluster.min_offset(topic, q) for q in range(QUEUES)] == [0] * QUEUES
    assert sum(maxima) == 1000 and min(maxima) > 0, maxima
    # The offsets handed back are exactly 0..max-1 of each queue, each once.
    assert Counter(r["offset"] for r in results) == Counter(o for m in maxima for o in range(m))

    messages = received(cpp.run("pull-consume", topic=topic, group=f"CID_{topic}", count=1000))
    assert len(messages) == 1000
    for queue, items in by_queue(messages).items():
        assert [m["queue_offset"] for m in items] == list(range(maxima[queue])), f"queue {queue} not dense from 0"
    by_index = {assert_intact(m, topic): m for m in messages}
    assert sorted(by_index) == list(range(1000))
    for result in results:
        message = by_index[result["index"]]
        assert (message["id"], message["queue_offset"]) == (result["msg_id"], result["offset"])


def test_send_orderly_keeps_each_key_on_one_queue_in_order(cluster, cpp, topic) -> None:
    keys = 6
    results = sent(cpp.run("produce-orderly", topic=topic, group=f"PID_{topic}", count=240, keys=keys))
    assert len(results) == 240

    messages = received(cpp.run("pull-consume", topic=topic, group=f"CID_{topic}", count=240))
    assert len(messages) == 240
    per_key: dict[str, list[Record]] = defaultdict(list)
    for message in sorted(messages, key=lambda m: (m["queue_id"], m["queue_offset"])):
        assert_intact(message, topic, key=message["keys"])
        per_key[message["keys"]].append(message)
    assert sorted(per_key) == [f"order-{k}" for k in range(keys)]
    for key, items in per_key.items():
        number = int(key.split("-")[1])
        assert {m["queue_id"] for m in items} == {number % QUEUES}, f"{key} spread over queues"
        seqs = [int(m["properties"]["seq"]) for m in items]
        assert seqs == sorted(seqs) and len(seqs) == 40, f"{key} out of order: {seqs}"
    # The producer's view agrees: per key, offsets strictly increase.
    for number in range(keys):
        offsets = [r["offset"] for r in results if r["key"] == f"order-{number}"]
        assert offsets == sorted(set(offsets))


def test_send_batch_plain_and_compressed(cluster, cpp, topic) -> None:
    # 5 batches of 10 small messages, then 2 batches of 16 padded ones (> 4 KiB: zlib-compressed).
    small = sent(cpp.run("produce-batch", topic=topic, group=f"PID_{topic}", batches=5, size=10, prefix="s"))
    large = sent(cpp.run("produce-batch", topic=topic, group=f"PID_{topic}", batches=2, size=16, prefix="L", pad=400))
    assert len(small) == 5 and len(large) == 2
    assert all(r["msg_id"] == "" for r in small + large)  # the C++ client reports no id for batches

    messages = received(cpp.run("pull-consume", topic=topic, group=f"CID_{topic}", count=82))
    assert len(messages) == 82
    assert sum(cluster.max_offset(topic, q) for q in range(QUEUES)) == 82
    for results, prefix, pad in ((small, "s", 0), (large, "L", 400)):
        items = {
            assert_intact(m, topic, prefix=prefix, pad=pad): m for m in messages if m["body"].startswith(prefix + "-")
        }
        for result in results:
            batch = [items[result["first"] + i] for i in range(result["size"])]
            assert len({m["queue_id"] for m in batch}) == 1, "a batch goes to one queue"
            assert [m["queue_offset"] for m in batch] == list(
                range(result["offset"], result["offset"] + result["size"])
            )


def test_pull_consumer_reads_queues_from_offset_zero(cluster, cpp, topic) -> None:
    sent(cpp.run("produce", topic=topic, group=f"PID_{topic}", count=40))
    messages = received(cpp.run("pull-consume", topic=topic, group=f"CID_{topic}", count=40))
    queues = by_queue(messages)
    assert sorted(queues) == list(range(QUEUES))
    for items in queues.values():
        assert [m["queue_offset"] for m in items] == list(range(len(items)))
    assert sorted(assert_intact(m, topic) for m in messages) == list(range(40))


def test_new_group_starts_from_the_beginning(cluster, cpp, topic) -> None:
    results = sent(cpp.run("produce", topic=topic, group=f"PID_{topic}", count=60))
    messages = received(cpp.run("push-consume", topic=topic, group=f"CID_{topic}", count=60, deadline=60))
    assert sorted(assert_intact(m, topic) for m in messages) == list(range(60))
    assert {m["id"] for m in messages} == {r["msg_id"] for r in results}
    for queue, items in by_queue(messages).items():
        assert items[0]["queue_offset"] == 0, f"queue {queue} started at {items[0]['queue_offset']}"


def test_clustering_push_consumer_receives_every_message_once(cluster, cpp, topic) -> None:
    group = f"CID_{topic}"
    before = sent(cpp.run("produce", topic=topic, group=f"PID_{topic}", count=100, prefix="a"))
    consumer = cpp.start("push-consume", topic=topic, group=group, count=300, deadline=75, linger=3)
    consumer.wait_for(lambda run: len(bodies(run, "a")) >= 100, 45, "the 100 messages sent before start")
    after = sent(cpp.run("produce", topic=topic, group=f"PID_{topic}", count=200, prefix="b"))
    messages = received(consumer.finish(90))

    positions = Counter((m["queue_id"], m["queue_offset"]) for m in messages)
    assert [p for p, n in positions.items() if n > 1] == [], "a message was delivered twice"
    assert len(messages) == 300
    for prefix, results in (("a", before), ("b", after)):
        items = [m for m in messages if m["body"].startswith(prefix + "-")]
        assert sorted(assert_intact(m, topic, prefix=prefix) for m in items) == list(range(len(results)))
        assert {m["id"] for m in items} == {r["msg_id"] for r in results}
    # shutdown() persisted the offsets: the broker's committed offsets cover everything.
    assert_eventually(lambda: all_committed(cluster, group, topic), 5, "committed offsets = max offsets")


def test_two_consumers_of_one_group_split_the_queues(cluster, cpp, topic) -> None:
    group = f"CID_{topic}"
    sent(cpp.run("produce", topic=topic, group=f"PID_{topic}", count=40, prefix="a"))
    first = cpp.start("push-consume", topic=topic, group=group, until_stdin=True, deadline=80, home="one")
    second = cpp.start("push-consume", topic=topic, group=group, until_stdin=True, deadline=80, home="two")
    for run in (first, second):
        run.wait_for(lambda r: bool(r.events("started")), 20, "start")
    assert_eventually(lambda: len(cluster.consumer_ids(group)) == 2, 20, "both consumers registered")

    def together(prefix: str) -> set[str]:
        return {b for run in (first, second) for b in bodies(run, prefix)}

    assert_eventually(lambda: len(together("a")) == 40, 45, "the first 40 messages consumed")
    time.sleep(3)  # the NOTIFY_CONSUMER_IDS_CHANGED rebalance has settled by now

    sent(cpp.run("produce", topic=topic, group=f"PID_{topic}", count=200, prefix="b"))
    assert_eventually(lambda: len(together("b")) == 200, 45, "the next 200 messages consumed")
    time.sleep(2)  # room for duplicates to show up
    for run in (first, second):
        run.request_stop()
    got = [[m for m in received(run.finish(30)) if m["body"].startswith("b-")] for run in (first, second)]

    queues = [{m["queue_id"] for m in items} for items in got]
    assert all(queues), f"one consumer got nothing: {queues}"
    assert queues[0].isdisjoint(queues[1]) and queues[0] | queues[1] == set(range(QUEUES)), queues
    everything = got[0] + got[1]
    assert len(everything) == 200, "a message after the split was delivered twice"
    assert sorted(assert_intact(m, topic, prefix="b") for m in everything) == list(range(200))


def test_broadcasting_delivers_everything_to_each_consumer(cluster, cpp, topic) -> None:
    group = f"CID_{topic}"
    # One message creates the topic: broadcasting consumers start at the queues' max offset.
    sent(cpp.run("produce", topic=topic, group=f"PID_{topic}", count=1, prefix="w"))
    consumers = [
        cpp.start("push-consume", topic=topic, group=group, broadcasting=True, until_stdin=True, deadline=80, home=home)
        for home in ("one", "two")
    ]
    for run in consumers:
        run.wait_for(lambda r: bool(r.events("started")), 20, "start")
    time.sleep(3)  # each has looked up its start offsets (GET_MAX_OFFSET) and parked its pulls

    sent(cpp.run("produce", topic=topic, group=f"PID_{topic}", count=100, prefix="b"))
    for run in consumers:
        run.wait_for(lambda r: len(set(bodies(r, "b"))) == 100, 45, "all 100 messages on this consumer")
    time.sleep(1)
    for run in consumers:
        run.request_stop()
    for run in consumers:
        items = [m for m in received(run.finish(30)) if m["body"].startswith("b-")]
        assert sorted(assert_intact(m, topic, prefix="b") for m in items) == list(range(100))


def test_restarted_consumer_resumes_from_committed_offset(cluster, cpp, topic) -> None:
    group = f"CID_{topic}"
    sent(cpp.run("produce", topic=topic, group=f"PID_{topic}", count=80, prefix="a"))
    first = received(cpp.run("push-consume", topic=topic, group=group, count=80, deadline=60, linger=1))
    assert sorted(assert_intact(m, topic, prefix="a") for m in first) == list(range(80))
    assert_eventually(lambda: all_committed(cluster, group, topic), 5, "committed offsets = max offsets")
    committed = [cluster.committed_offset(group, topic, q) for q in range(QUEUES)]
    assert sum(committed) == 80

    sent(cpp.run("produce", topic=topic, group=f"PID_{topic}", count=40, prefix="b"))
    second = received(cpp.run("push-consume", topic=topic, group=group, count=40, deadline=60, linger=3))
    redelivered = [m for m in second if m["body"].startswith("a-")]
    assert redelivered == [], f"{len(redelivered)} committed messages came again (started over?)"
    assert sorted(assert_intact(m, topic, prefix="b") for m in second) == list(range(40))
    for queue, items in by_queue(second).items():
        assert items[0]["queue_offset"] == committed[queue]


def all_committed(cluster, group: str, topic: str) -> bool:
    committed = [cluster.committed_offset(group, topic, q) for q in range(QUEUES)]
    return committed == [cluster.max_offset(topic, q) for q in range(QUEUES)]


def assert_eventually(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        time.sleep(0.1)


def test_admin_reads_the_queues_a_cpp_consumer_holds(cluster, cpp, topic) -> None:
    """GET_CONSUMER_RUNNING_INFO passed on by the broker to the C++ consumer and its answer parsed
    (mqadmin consumerProgress's "#Client IP")."""
    group = f"CID_{topic}"
    sent(cpp.run("produce", topic=topic, group=f"PID_{topic}", count=20))
    consumer = cpp.start("push-consume", topic=topic, group=group, until_stdin=True, deadline=60)
    consumer.wait_for(lambda run: len(run.events("received")) >= 20, 45, "the 20 messages")
    [client_id] = cluster.consumer_ids(group)

    async def ask() -> tuple[Any, Any]:
        async with AdminExt(cluster.namesrv.address) as admin:
            return await admin.consumer_running_info(group, client_id), await admin.queue_owners(group)

    info, owners = asyncio.run(ask())
    assert sorted(q.queue_id for q in info.mq_table if q.topic == topic) == list(range(QUEUES))
    assert {owners[q] for q in info.mq_table} == {client_id.split("@")[0]}
    consumer.request_stop()
    consumer.finish(30)
