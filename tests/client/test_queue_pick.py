"""The producer's queue choice: while brokers are paused (latency fault tolerance), and under a deep pipeline.

``AsyncProducer._pick`` must choose exactly the queue RocketMQ's per-queue loop chooses (the first
queue from the round-robin counter's whose broker is neither the one to avoid nor paused, else the
counter's own), while asking each broker's availability once per pick: a topic of a thousand
queues on one paused broker cost a thousand clock reads per send. A producer with 64 sends in
flight keeps each queue for a run of ``QUEUE_RUN`` sends (the broker's work per queue a group
touches is then paid once per run) and still spreads its sends evenly; single sends rotate per send.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from sparkmq.client import AsyncProducer, Message
from sparkmq.client.fault import LatencyFaultTolerance
from sparkmq.client.producer import QUEUE_RUN, RUNS_IN_FLIGHT
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


# -- runs of sends per queue under a deep pipeline (real NameServer and broker) ----------------------------


def test_single_sends_take_the_next_queue_every_send(cluster) -> None:
    topic = cluster.topic(queues=4)

    async def scenario() -> list[int]:
        async with AsyncProducer("PID_pick_single", cluster.ns) as producer:
            return [(await producer.send(Message(topic, b"x"))).queue.queue_id for _ in range(12)]

    ids = asyncio.run(scenario())
    assert all(b == (a + 1) % 4 for a, b in itertools.pairwise(ids)), ids


def test_a_deep_pipeline_keeps_each_queue_for_a_run_of_sends_and_spreads_them_evenly(cluster) -> None:
    queues, sends = 8, 2048
    topic = cluster.topic(queues=queues)

    async def scenario() -> tuple[list[int], list[int]]:
        async with AsyncProducer("PID_pick_runs", cluster.ns) as producer:
            await producer.send(Message(topic, b"warm-up"))  # route and connection held: the sends are lean
            window = asyncio.Semaphore(128)
            futures = []
            for _ in range(sends):
                await window.acquire()
                futures.append(producer.send_async(Message(topic, b"x"), lambda done: window.release()))
            results = await asyncio.gather(*futures)
            while time.time() * 1000 <= producer._runs_until_ms:  # the hold ends (100 ms after the last deep send)
                await asyncio.sleep(0.01)
            after = [(await producer.send(Message(topic, b"y"))).queue.queue_id for _ in range(6)]
            return [r.queue.queue_id for r in results], after

    ids, after = asyncio.run(scenario())
    deep = ids[RUNS_IN_FLIGHT + 1 :]  # from the send after the first that found 64 in flight
    changes = sum(1 for a, b in itertools.pairwise(deep) if a != b)
    assert changes <= len(deep) // QUEUE_RUN + 1, changes  # every send's own queue would be ~len(deep) changes
    runs = [len(list(group)) for _, group in itertools.groupby(deep)]
    assert max(runs) <= QUEUE_RUN and sum(r == QUEUE_RUN for r in runs) >= len(runs) - 2, runs
    counts = collections.Counter(ids)
    assert sorted(counts) == list(range(queues))
    assert max(counts.values()) - min(counts.values()) <= 2 * QUEUE_RUN, counts
    # drained and the hold over: single sends take the next queue each again
    assert all(b == (a + 1) % queues for a, b in itertools.pairwise(after)), after
