"""The producer's queue choice while brokers are paused (latency fault tolerance).

``AsyncProducer._pick`` must choose exactly the queue RocketMQ's per-queue loop chooses (the first
queue from the round-robin counter's whose broker is neither the one to avoid nor paused, else the
counter's own), while asking each broker's availability once per pick: a topic of a thousand
queues on one paused broker cost a thousand clock reads per send.
"""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from sparkmq.client import AsyncProducer
from sparkmq.client.fault import LatencyFaultTolerance
from sparkmq.protocol.bodies import MessageQueue


class CountingClock:
    """A monotonic clock (seconds) the test moves, counting its reads."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now


def producer_with(clock: CountingClock) -> AsyncProducer:
    producer = AsyncProducer("PID_queue_pick", "127.0.0.1:1")  # never started: no connection is made
    producer.faults = LatencyFaultTolerance(clock)
    producer._counter = itertools.count()  # the round robin from queue 0 (a producer's own start is random)
    return producer


def reference_pick(faults: LatencyFaultTolerance, queues: list[MessageQueue], start: int, avoid: str | None):
    """RocketMQ's loop, one availability check per queue."""
    for i in range(len(queues)):
        queue = queues[(start + i) % len(queues)]
        if queue.broker_name != avoid and faults.is_available(queue.broker_name):
            return queue
    return queues[start % len(queues)]


def route(layout: list[tuple[str, int]]) -> list[MessageQueue]:
    return [MessageQueue("T", broker, q) for broker, count in layout for q in range(count)]


def test_a_thousand_queues_of_one_paused_broker_cost_one_check_per_pick() -> None:
    clock = CountingClock()
    producer = producer_with(clock)
    queues = route([("broker-a", 1000)])
    producer.faults.record("broker-a", 600)  # 550 ms or more: paused for 30 s
    clock.reads = 0
    picked = [producer._pick(queues, None) for _ in range(50)]
    assert [q.queue_id for q in picked] == list(range(50))  # round-robin goes on
    assert clock.reads == 50  # one per pick (the per-queue loop read it 50,000 times)


def test_a_paused_broker_is_skipped_and_the_round_robin_continues_on_the_other() -> None:
    clock = CountingClock()
    producer = producer_with(clock)
    queues = route([("broker-a", 3), ("broker-b", 2)])
    producer.faults.record("broker-a", 600)
    picked = [(q.broker_name, q.queue_id) for q in (producer._pick(queues, None) for _ in range(5))]
    # counter 0..2 lands on broker-a's queues: the first broker-b queue after it; 3, 4 are broker-b's own
    assert picked == [("broker-b", 0), ("broker-b", 0), ("broker-b", 0), ("broker-b", 0), ("broker-b", 1)]
    clock.now += 31  # the pause is over
    assert producer._pick(queues, None) == queues[5 % 5]


@settings(max_examples=200, deadline=None)
@given(
    layout=st.lists(st.tuples(st.sampled_from("abcd"), st.integers(1, 6)), min_size=1, max_size=6),
    paused=st.sets(st.sampled_from("abcd")),
    avoid=st.sampled_from([None, "a", "b", "c", "d"]),
    start=st.integers(0, 50),
    picks=st.integers(1, 12),
)
def test_the_pick_is_the_per_queue_loops_pick(layout, paused, avoid, start, picks) -> None:
    clock = CountingClock()
    producer = producer_with(clock)
    queues = route(layout)  # a broker may come back later in the list (interleaved routes)
    for broker in sorted(paused):
        producer.faults.record(broker, 600)
    producer._counter = itertools.count(start)
    for k in range(picks):
        assert producer._pick(queues, avoid) is reference_pick(producer.faults, queues, start + k, avoid)
