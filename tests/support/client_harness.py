"""Helpers for tests of sparkmq's own clients against real NameServer + broker processes.

* ``create_topic`` / ``wait_for_route``: make a topic with a known queue count on brokers and
  wait until the NameServer routes it (UPDATE_AND_CREATE_TOPIC, then GET_ROUTEINFO_BY_TOPIC);
* ``Inbox``: a thread-safe record of what push-consumer listeners received, in one global order;
* ``Clients``: every client a test opens, closed at teardown even when the test fails;
* ``read_queue``: what a queue stores, from offset 0; ``message``: a numbered test message.

>>> # create_topic([broker.address], "T", queues=8); wait_for_route(ns.address, "T", {"broker-a"})
>>> # inbox = Inbox(); consumer = clients.push("G", ns.address, "T", inbox.listener("c1"))
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from sparkmq.client import ConsumeResult, Message, Producer, PullConsumer, PushConsumer, ReceivedMessage
from sparkmq.client.message import decode_pull_body
from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.protocol.admin_headers import CreateTopicRequestHeader, GetRouteInfoRequestHeader
from sparkmq.protocol.bodies import MessageQueue, TopicRouteData
from sparkmq.remoting import RemotingClient

READ_WRITE = 6


async def _call(address: str, code: int, fields: dict[str, str]) -> tuple[int, str | None, bytes]:
    client = RemotingClient()
    try:
        response = await client.invoke(address, code, fields, timeout=5.0)
    finally:
        await client.close()
    return response.code, response.remark, response.body


def create_topic(broker_addresses: Iterable[str], topic: str, queues: int) -> None:
    """UPDATE_AND_CREATE_TOPIC on each broker (read = write = ``queues``)."""
    header = CreateTopicRequestHeader(topic, "TBW102", queues, queues, READ_WRITE, "SINGLE_TAG", False).to_fields()
    for address in broker_addresses:
        code, remark, _ = asyncio.run(_call(address, RequestCode.UPDATE_AND_CREATE_TOPIC, header))
        assert code == ResponseCode.SUCCESS, (address, code, remark)


def route_brokers(namesrv: str, topic: str) -> set[str]:
    """Broker names the NameServer routes ``topic`` to (empty when it knows no route)."""
    code, _, body = asyncio.run(
        _call(namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic).to_fields())
    )
    if code == ResponseCode.TOPIC_NOT_EXIST:
        return set()
    assert code == ResponseCode.SUCCESS, code
    return {q.broker_name for q in TopicRouteData.decode(body).queue_datas}


def wait_for_route(namesrv: str, topic: str, brokers: set[str], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while route_brokers(namesrv, topic) != brokers:
        if time.monotonic() > deadline:
            raise AssertionError(f"NameServer routes {topic} to {route_brokers(namesrv, topic)}, not {brokers}")
        time.sleep(0.05)


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll until true; fail saying ``what`` did not happen."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.02)


@dataclass(frozen=True, slots=True)
class Receipt:
    """One listener call: who got which message, and its place in the global order."""

    seq: int
    consumer: str
    message: ReceivedMessage
    at: float = 0.0  # time.monotonic() when the listener recorded it

    @property
    def where(self) -> tuple[MessageQueue, int]:
        return self.message.queue, self.message.queue_offset


@dataclass
class Inbox:
    """What every listener of a test received, in the order the listeners were called."""

    receipts: list[Receipt] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _seq: itertools.count = field(default_factory=itertools.count)

    def listener(
        self, consumer: str, before: Callable[[ReceivedMessage], None] | None = None
    ) -> Callable[[ReceivedMessage], ConsumeResult]:
        """A listener that records each message and says it was consumed."""

        def listen(message: ReceivedMessage) -> ConsumeResult:
            if before is not None:
                before(message)
            with self._lock:
                self.receipts.append(Receipt(next(self._seq), consumer, message, time.monotonic()))
            return ConsumeResult.SUCCESS

        return listen

    def snapshot(self, consumer: str | None = None, topic: str | None = None) -> list[Receipt]:
        with self._lock:
            return [
                r
                for r in self.receipts
                if (consumer is None or r.consumer == consumer) and (topic is None or r.message.topic == topic)
            ]

    def distinct(self, topic: str | None = None) -> set[tuple[MessageQueue, int]]:
        return {r.where for r in self.snapshot(topic=topic)}

    def counts(self, topic: str | None = None) -> Counter[tuple[MessageQueue, int]]:
        return Counter(r.where for r in self.snapshot(topic=topic))

    def wait_distinct(self, expected: int, timeout_s: float, topic: str | None = None) -> None:
        wait_for(
            lambda: len(self.distinct(topic)) >= expected,
            timeout_s,
            f"{expected} distinct messages (have {len(self.distinct(topic))})",
        )

    def by_queue(self, topic: str | None = None) -> dict[MessageQueue, list[Receipt]]:
        queues: dict[MessageQueue, list[Receipt]] = defaultdict(list)
        for receipt in self.snapshot(topic=topic):
            queues[receipt.message.queue].append(receipt)
        return dict(queues)


class Clients:
    """Opens sparkmq clients for one test and closes every one still open at teardown."""

    def __init__(self) -> None:
        self._open: list[Any] = []

    def producer(self, group: str, namesrv: str, **options: Any) -> Producer:
        return self._started(Producer(group, namesrv, **options))

    def pull(self, group: str, namesrv: str, **options: Any) -> PullConsumer:
        return self._started(PullConsumer(group, namesrv, **options))

    def push(
        self,
        group: str,
        namesrv: str,
        topic: str,
        listener: Callable[[ReceivedMessage], Any],
        expression: str = "*",
        **options: Any,
    ) -> PushConsumer:
        consumer = PushConsumer(group, namesrv, **options)
        consumer.subscribe(topic, expression, listener)
        return self._started(consumer)

    def _started(self, client: Any) -> Any:
        client.start()
        self._open.append(client)
        return client

    def close(self, client: Any) -> None:
        """Close one client now (a consumer leaving mid-test)."""
        self._open.remove(client)
        client.close()

    def close_all(self) -> None:
        errors = []
        while self._open:
            client = self._open.pop()
            try:
                client.close()
            except Exception as exc:  # keep closing the rest; the first failure is re-raised below
                errors.append(exc)
        if errors:
            raise errors[0]


def topic_queues(consumer: PushConsumer, topic: str) -> set[MessageQueue]:
    """The queues of ``topic`` a push consumer holds now."""
    return {q for q in consumer.assigned if q.topic == topic}


def read_queue(pull: PullConsumer, queue: MessageQueue) -> list[ReceivedMessage]:
    """Every stored message of ``queue`` from offset 0, through the pull consumer's raw pulls."""
    messages: list[ReceivedMessage] = []
    offset = 0
    while (result := pull.pull_raw(queue, offset, 256)).found:
        messages += decode_pull_body(result.body, queue.broker_name)
        offset = result.next_begin_offset
    return messages


def message(topic: str, index: int, body: bytes | None = None, **extra: Any) -> Message:
    """Message ``index`` with a tag, two keys and user properties derived from the index."""
    return Message(
        topic,
        body if body is not None else f"body-{index}".encode(),
        tags=f"Tag{index % 3}",
        keys=[f"key-{index}", f"k{index % 7}"],
        properties={"seq": str(index), "color": ("red", "green", "blue")[index % 3]},
        **extra,
    )
