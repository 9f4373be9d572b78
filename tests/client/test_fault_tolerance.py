"""A producer keeps sending when one of two brokers dies (SIGKILL) mid-stream.

Two brokers (``broker-a``, ``broker-b``) register with one NameServer every second; a topic has
queues on both. A producer sends in a loop; ``broker-b`` is killed. Sends that were in flight to
it fail over to ``broker-a`` within the retry budget, the NameServer drops ``broker-b``'s routes,
the producer's latency fault tolerance and refreshed route keep it away — ``send`` never raises,
and every acknowledged message is really stored on the broker that acknowledged it.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

from sparkmq.client import SendResult
from sparkmq.protocol.bodies import MessageQueue
from support.client_harness import create_topic, message, read_queue, route_brokers, wait_for, wait_for_route
from support.processes import BrokerProcess, NamesrvProcess

QUEUES = 4
REGISTER_EVERY_MS = "registerNameServerPeriod=1000"


class LoopingProducer(threading.Thread):
    """Sends until stopped; records every result with the time it came back."""

    def __init__(self, producer, topic: str) -> None:
        super().__init__(name="looping-producer", daemon=True)
        self.producer, self.topic = producer, topic
        self.results: list[tuple[float, SendResult]] = []
        self.error: BaseException | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        i = 0
        try:
            while not self.stop.is_set():
                result = self.producer.send(message(self.topic, i))
                self.results.append((time.monotonic(), result))
                i += 1
                time.sleep(0.002)
        except BaseException as exc:  # reported by the test thread
            self.error = exc


def test_producer_fails_over_when_a_broker_is_killed_mid_stream(tmp_path: Path, clients) -> None:
    with (
        NamesrvProcess.start() as namesrv,
        BrokerProcess.start(tmp_path / "a", namesrv.address, "--set", REGISTER_EVERY_MS) as broker_a,
        BrokerProcess.start(
            tmp_path / "b", namesrv.address, "--set", REGISTER_EVERY_MS, "--set", "brokerName=broker-b"
        ) as broker_b,
    ):
        topic = "FailoverTopic"
        create_topic([broker_a.address, broker_b.address], topic, QUEUES)
        wait_for_route(namesrv.address, topic, {"broker-a", "broker-b"})
        producer = clients.producer("PID_failover", namesrv.address)
        loop = LoopingProducer(producer, topic)
        loop.start()
        wait_for(
            lambda: Counter(r.queue.broker_name for _, r in loop.results)["broker-b"] >= 100,
            20,
            "100 messages on broker-b",
        )
        broker_b.kill()
        killed_at = time.monotonic()
        wait_for(
            lambda: not loop.is_alive() or "broker-b" not in route_brokers(namesrv.address, topic),
            10,
            "the NameServer to drop broker-b's route",
        )
        wait_for(
            lambda: not loop.is_alive() or sum(1 for t, _ in loop.results if t > killed_at) >= 500,
            30,
            "500 more sends after the kill",
        )
        loop.stop.set()
        loop.join(10)
        assert loop.error is None, f"a send raised after the kill: {loop.error!r}"

        before = Counter(r.queue.broker_name for t, r in loop.results if t <= killed_at)
        after = Counter(r.queue.broker_name for t, r in loop.results if t > killed_at)
        print(f"failover: before kill {dict(before)}, after {dict(after)}")
        assert before["broker-a"] > 0 and before["broker-b"] >= 100
        assert after["broker-a"] >= 500 and after["broker-b"] <= 1, after  # one send may have been answered as b died

        # Everything broker-a acknowledged is stored there, at the offset it reported.
        reader = clients.pull("CID_failover_check", namesrv.address, auto_commit_interval_s=None)
        acknowledged = {
            (r.queue.queue_id, r.queue_offset): r.msg_id for _, r in loop.results if r.queue.broker_name == "broker-a"
        }
        stored = {
            (q, got.queue_offset): got.msg_id
            for q in range(QUEUES)
            for got in read_queue(reader, MessageQueue(topic, "broker-a", q))
        }
        assert {k: stored.get(k) for k in acknowledged} == acknowledged
        clients.close_all()  # while broker-a and the NameServer still run
