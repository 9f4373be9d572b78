"""The consumer semantics RocketMQ users rely on, against a real broker: what a listener's result
means, orderly suspension and its dead-letter bound, batch listeners, flow control by count and
span, consume timeouts, where a new consumer starts, lite-pull rebalance, Java's hash selector,
and finding messages through Admin."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable

from sparkmq import Admin, ConsumeResult, Message, MessageQueue, ReceivedMessage, select_by_hash
from sparkmq.client.rebalance import allocate_averagely_by_circle, allocate_consistent_hash
from sparkmq.protocol.heartbeat import ConsumeFromWhere, MessageModel
from support.client_harness import read_queue, topic_queues, wait_for, wait_for_route

TIMEOUT_S = 30.0


def send_numbered(clients, ns: str, topic: str, count: int, start: int = 0) -> list:
    producer = clients.producer("PID_semantics", ns)
    return [
        producer.send(Message(topic, f"m{i}".encode(), keys=[f"key-{i}"], properties={"seq": str(i)}))
        for i in range(start, start + count)
    ]


class Recorder:
    """A listener whose answer per call is chosen by ``decide(message, attempt)``; records every call."""

    def __init__(self, decide: Callable[[ReceivedMessage, int], ConsumeResult | None]) -> None:
        self.decide = decide
        self.calls: list[tuple[int, int]] = []  # (seq, reconsume_times) per call
        self.consumed: list[int] = []
        self._attempts: Counter[int] = Counter()
        self._lock = threading.Lock()

    def __call__(self, message: ReceivedMessage) -> ConsumeResult | None:
        seq = int(message.properties["seq"])
        with self._lock:
            self._attempts[seq] += 1
            attempt = self._attempts[seq]
            self.calls.append((seq, message.reconsume_times))
        result = self.decide(message, attempt)
        if result is ConsumeResult.SUCCESS:
            with self._lock:
                self.consumed.append(seq)
        return result

    def attempts(self, seq: int) -> int:
        with self._lock:
            return self._attempts[seq]


def stays_at_most(value: Callable[[], int], bound: int, samples: int = 20) -> None:
    """``value()`` never exceeds ``bound`` over a short observation window."""
    for _ in range(samples):
        assert value() <= bound, f"{value()} > {bound}"
        time.sleep(0.025)


def test_none_or_an_exception_from_the_listener_means_reconsume_later(cluster, clients, group) -> None:
    topic = cluster.topic(queues=2)
    send_numbered(clients, cluster.ns, topic, 10)

    def decide(message: ReceivedMessage, attempt: int) -> ConsumeResult | None:
        seq = int(message.properties["seq"])
        if seq == 3 and attempt == 1:
            return None
        if seq == 5 and attempt == 1:
            raise RuntimeError("listener bug")
        return ConsumeResult.SUCCESS

    recorder = Recorder(decide)
    consumer = clients.push(group, cluster.ns, topic, recorder)
    wait_for(lambda: sorted(recorder.consumed) == list(range(10)), TIMEOUT_S, "every message consumed")
    assert recorder.attempts(3) == 2 and recorder.attempts(5) == 2
    assert all(recorder.attempts(seq) == 1 for seq in range(10) if seq not in (3, 5))
    assert {(seq, times) for seq, times in recorder.calls if seq in (3, 5)} == {(3, 0), (3, 1), (5, 0), (5, 1)}
    consumer.close()


def test_orderly_retries_a_failing_message_in_place_beyond_sixteen_attempts(cluster, clients, group) -> None:
    topic = cluster.topic(queues=1)
    send_numbered(clients, cluster.ns, topic, 6)
    recorder = Recorder(
        lambda m, attempt: None if m.properties["seq"] == "2" and attempt <= 20 else ConsumeResult.SUCCESS
    )
    clients.push(group, cluster.ns, topic, recorder, orderly=True, suspend_current_queue_time_s=0.02)
    wait_for(lambda: len(recorder.consumed) == 6, TIMEOUT_S, "every message consumed")
    assert recorder.consumed == list(range(6))  # nothing overtook the failing message
    assert recorder.attempts(2) == 21


def test_orderly_with_a_max_dead_letters_after_that_many_failures(cluster, clients, group) -> None:
    topic = cluster.topic(queues=1)
    send_numbered(clients, cluster.ns, topic, 5)
    recorder = Recorder(lambda m, attempt: None if m.properties["seq"] == "2" else ConsumeResult.SUCCESS)
    clients.push(
        group, cluster.ns, topic, recorder, orderly=True, max_reconsume_times=2, suspend_current_queue_time_s=0.02
    )
    wait_for(lambda: recorder.consumed == [0, 1, 3, 4], TIMEOUT_S, "the others consumed in order")
    assert recorder.attempts(2) == 3
    dlq = f"%DLQ%{group}"
    wait_for_route(cluster.ns, dlq, {"broker-a"})
    reader = clients.pull("CID_dlq_reader", cluster.ns, auto_commit_interval_s=None)
    assert [m.properties["seq"] for m in read_queue(reader, MessageQueue(dlq, "broker-a", 0))] == ["2"]


def test_a_batch_listener_gets_lists_up_to_the_max_size(cluster, clients, group) -> None:
    topic = cluster.topic(queues=1)
    send_numbered(clients, cluster.ns, topic, 100)
    sizes: list[int] = []
    seen: list[int] = []
    lock = threading.Lock()

    def on_batch(messages: list[ReceivedMessage]) -> ConsumeResult:
        with lock:
            sizes.append(len(messages))
            seen.extend(int(m.properties["seq"]) for m in messages)
        return ConsumeResult.SUCCESS

    clients.push(group, cluster.ns, topic, on_batch, consume_message_batch_max_size=8, pull_batch_size=32)
    wait_for(lambda: len(seen) >= 100, TIMEOUT_S, "100 messages in batches")
    assert sorted(seen) == list(range(100))
    assert max(sizes) == 8 and all(1 <= size <= 8 for size in sizes)


def test_flow_control_by_count_bounds_what_is_cached(cluster, clients, group) -> None:
    topic = cluster.topic(queues=1)
    send_numbered(clients, cluster.ns, topic, 200)
    release = threading.Event()
    recorder = Recorder(lambda m, attempt: ConsumeResult.SUCCESS if release.wait(TIMEOUT_S) else None)
    consumer = clients.push(
        group, cluster.ns, topic, recorder, consume_threads=1, pull_batch_size=5, pull_threshold_for_queue=10
    )
    try:
        wait_for(lambda: consumer.cached_message_count >= 10, TIMEOUT_S, "the cache to fill to its threshold")
        stays_at_most(lambda: consumer.cached_message_count, 10 + 5)  # one pull may be out when it fills
    finally:
        release.set()
    wait_for(lambda: len(recorder.consumed) == 200, TIMEOUT_S, "everything consumed once released")


def test_flow_control_by_span_stops_pulling_past_a_stuck_message(cluster, clients, group) -> None:
    topic = cluster.topic(queues=1)
    send_numbered(clients, cluster.ns, topic, 200)
    release = threading.Event()
    recorder = Recorder(
        lambda m, attempt: ConsumeResult.SUCCESS if m.properties["seq"] != "0" or release.wait(TIMEOUT_S) else None
    )
    clients.push(
        group, cluster.ns, topic, recorder, consume_threads=2, pull_batch_size=5, consume_concurrently_max_span=20
    )
    try:
        wait_for(lambda: len(recorder.consumed) >= 15, TIMEOUT_S, "messages behind the stuck one consumed")
        stays_at_most(lambda: len(recorder.consumed), 20 + 5)
    finally:
        release.set()
    wait_for(lambda: len(recorder.consumed) == 200, TIMEOUT_S, "everything consumed once released")


def test_a_listener_call_past_the_consume_timeout_is_retried(cluster, clients, group) -> None:
    topic = cluster.topic(queues=1)
    send_numbered(clients, cluster.ns, topic, 5)
    stuck = threading.Event()
    recorder = Recorder(
        lambda m, attempt: (
            None if m.properties["seq"] == "1" and attempt == 1 and not stuck.wait(TIMEOUT_S) else ConsumeResult.SUCCESS
        )
    )
    try:
        clients.push(group, cluster.ns, topic, recorder, consume_timeout_s=0.3)
        wait_for(lambda: sorted(recorder.consumed) == [0, 1, 2, 3, 4], TIMEOUT_S, "every message consumed")
        assert (1, 1) in recorder.calls  # redelivered from %RETRY% while the first call still ran
    finally:
        stuck.set()


def test_consume_from_where_places_a_new_consumer(cluster, clients, group, offset_dir) -> None:
    topic = cluster.topic(queues=1)
    send_numbered(clients, cluster.ns, topic, 5)
    time.sleep(0.05)  # store timestamps are in ms: keep "before" and "after" apart
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    send_numbered(clients, cluster.ns, topic, 5, start=5)
    options = dict(message_model=MessageModel.BROADCASTING, offset_dir=offset_dir)
    received: dict[str, Recorder] = {}
    for name, where, extra in [
        ("last", ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, {}),
        ("first", ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, {}),
        ("time", ConsumeFromWhere.CONSUME_FROM_TIMESTAMP, {"consume_timestamp_ms": middle}),
    ]:
        received[name] = Recorder(lambda m, a: ConsumeResult.SUCCESS)
        clients.push(
            f"{group}_{name}",
            cluster.ns,
            topic,
            received[name],
            consume_from_where=where,
            instance_name=name,
            **options,
            **extra,
        )
    send_numbered(clients, cluster.ns, topic, 2, start=10)
    wait_for(lambda: len(received["first"].consumed) == 12, TIMEOUT_S, "FIRST_OFFSET: everything")
    wait_for(lambda: len(received["time"].consumed) == 7, TIMEOUT_S, "TIMESTAMP: from the middle on")
    wait_for(lambda: len(received["last"].consumed) == 2, TIMEOUT_S, "LAST_OFFSET: only what came after start")
    assert sorted(received["time"].consumed) == list(range(5, 12))
    assert sorted(received["last"].consumed) == [10, 11]


def test_subscribed_pull_consumers_split_the_queues_and_take_over(cluster, clients, group) -> None:
    topic = cluster.topic(queues=4)
    first = clients.pull(group, cluster.ns)
    first.subscribe(topic)
    second = clients.pull(group, cluster.ns)
    second.subscribe(topic)
    halves = lambda: (set(first.positions), set(second.positions))  # noqa: E731
    wait_for(lambda: all(len(h) == 2 for h in halves()), TIMEOUT_S, "two queues each")
    assert not set(first.positions) & set(second.positions)
    send_numbered(clients, cluster.ns, topic, 40)
    got: list[int] = []
    while len(got) < 40:
        batch = first.poll(0.2) + second.poll(0.2)
        got += [int(m.properties["seq"]) for m in batch]
    assert sorted(got) == list(range(40))
    clients.close(second)
    wait_for(lambda: len(first.positions) == 4, TIMEOUT_S, "the remaining member takes every queue")


def test_consumers_split_the_queues_by_the_strategy_they_name(cluster, clients, group) -> None:
    topic = cluster.topic(queues=8)
    queues = [MessageQueue(topic, "broker-a", q) for q in range(8)]
    pulls = [clients.pull(group, cluster.ns, allocate="AVG_BY_CIRCLE") for _ in range(2)]
    for pull in pulls:
        pull.subscribe(topic)
    ids = [pull._async.instance.client_id for pull in pulls]
    wanted = [set(allocate_averagely_by_circle(cid, queues, ids)) for cid in ids]
    wait_for(lambda: [set(p.positions) for p in pulls] == wanted, TIMEOUT_S, "every other queue each (by circle)")
    pushes = [
        clients.push(f"{group}_hash", cluster.ns, topic, lambda m: ConsumeResult.SUCCESS, allocate="CONSISTENT_HASH")
        for _ in range(2)
    ]
    ids = [push._async.instance.client_id for push in pushes]
    wanted = [set(allocate_consistent_hash()(cid, queues, ids)) for cid in ids]
    wait_for(lambda: [topic_queues(p, topic) for p in pushes] == wanted, TIMEOUT_S, "the hash ring's split")


def test_select_by_hash_picks_the_queue_java_picks() -> None:
    queues = [MessageQueue("T", "b", i) for i in range(8)]
    # Java: "hello".hashCode() = 99162322; "polygenelubricants".hashCode() = Integer.MIN_VALUE; Long 2^40 folds to 256.
    expected = {"hello": 99162322 % 8, "polygenelubricants": 0, 7: 7, -9: 1, 2**40: 256 % 8}
    assert {key: select_by_hash(queues, None, key).queue_id for key in expected} == expected


def test_admin_finds_messages_by_key_unique_key_offset_id_and_time(cluster, clients) -> None:
    topic = cluster.topic(queues=2)
    results = send_numbered(clients, cluster.ns, topic, 6)
    with Admin(cluster.ns) as admin:
        wait_for(lambda: len(admin.query_by_key(topic, "key-4")) == 1, TIMEOUT_S, "the index to find key-4")
        [by_key] = admin.query_by_key(topic, "key-4")
        assert by_key.body == b"m4" and by_key.msg_id == results[4].msg_id
        unique = admin.message_by_unique_key(topic, results[2].msg_id)
        assert unique is not None and unique.body == b"m2"
        assert admin.message_by_offset_id(results[5].offset_msg_id).body == b"m5"
        later = by_key.store_timestamp + 60_000
        assert admin.query_by_key(topic, "key-4", begin_ms=later) == []
        assert admin.message_by_unique_key(topic, "0" * 32) is None
