"""Issue 15: FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT and SLAVE_NOT_AVAILABLE are not "delivered".

A real NameServer and broker (``support.unconfirming_broker``) store every message; chosen sends
answer one of the three codes instead of SUCCESS. The producer retries such an answer like a
failure (``retry_times_when_send_failed``) and, when no attempt is confirmed, raises
DurabilityNotConfirmedError carrying the status: sync, async and batch sends alike.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future

import pytest

from sparkmq import DurabilityNotConfirmedError, SparkmqError
from sparkmq.client import Message, Producer, SendResult, SendStatus
from sparkmq.errors import MessageTooLargeError
from sparkmq.message.layout import DEFAULT_MAX_MESSAGE_BYTES
from sparkmq.protocol import ResponseCode
from support.unconfirming_broker import UnconfirmingCluster

UNCONFIRMED = [ResponseCode.FLUSH_DISK_TIMEOUT, ResponseCode.FLUSH_SLAVE_TIMEOUT, ResponseCode.SLAVE_NOT_AVAILABLE]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UnconfirmingCluster]:
    with UnconfirmingCluster.start(tmp_path_factory.mktemp("unconfirming")) as running:
        yield running


@pytest.fixture
def producer(cluster: UnconfirmingCluster) -> Iterator[Producer]:
    cluster.answers.clear()
    cluster.always.clear()
    with Producer("PID_unconfirmed", cluster.ns) as opened:
        yield opened
    cluster.always.clear()


def test_an_unconfirmed_answer_is_retried_and_the_confirmed_attempt_returned(
    cluster: UnconfirmingCluster, producer: Producer
) -> None:
    topic = cluster.topic("UnconfirmedOnce", queues=1)
    cluster.answers.append(ResponseCode.FLUSH_DISK_TIMEOUT)
    result = producer.send(Message(topic, b"m"))
    assert result.status is SendStatus.SEND_OK and result.queue_offset == 1
    assert not cluster.answers
    assert cluster.stored(topic, 0) == 2  # at-least-once: the unconfirmed copy stays stored


@pytest.mark.parametrize("code", UNCONFIRMED, ids=lambda c: ResponseCode(c).name)
def test_every_attempt_unconfirmed_raises_a_retriable_error_with_the_status(
    cluster: UnconfirmingCluster, producer: Producer, code: int
) -> None:
    topic = cluster.topic(f"Unconfirmed{int(code)}", queues=1)
    cluster.always.append(code)
    with pytest.raises(DurabilityNotConfirmedError) as raised:
        producer.send(Message(topic, b"m"))
    error = raised.value
    assert (error.code, error.status, error.retriable) == (code, ResponseCode(code).name, True)
    assert ResponseCode(code).name in error.remark
    assert cluster.stored(topic, 0) == 3  # 1 + retry_times_when_send_failed (2) attempts


def test_sends_after_the_first_check_the_same(cluster: UnconfirmingCluster, producer: Producer) -> None:
    """Once the producer holds the topic's route and connection, a plain send is written and awaited
    without the general path (``_lean_attempt``); its answers are checked and retried all the same."""
    topic = cluster.topic("UnconfirmedLater", queues=1)
    assert producer.send(Message(topic, b"warm-up")).queue_offset == 0
    assert producer._async._lanes[topic].connections  # route and connection cached: the next sends are lean
    cluster.answers.append(ResponseCode.FLUSH_DISK_TIMEOUT)
    assert producer.send(Message(topic, b"once")).queue_offset == 2
    cluster.always.append(ResponseCode.SLAVE_NOT_AVAILABLE)
    with pytest.raises(DurabilityNotConfirmedError) as raised:
        producer.send(Message(topic, b"never"))
    assert (raised.value.status, raised.value.retriable) == ("SLAVE_NOT_AVAILABLE", True)
    assert cluster.stored(topic, 0) == 6  # warm-up, 2 attempts, 3 attempts


def test_blocking_sends_raise_what_the_async_producer_raises(cluster: UnconfirmingCluster, producer: Producer) -> None:
    """``Producer.send``/``send_async`` start the send on the client loop without a Task (``start_send``):
    a failure before the request, a lean attempt's unconfirmed answers and their retries reach the caller."""
    topic = cluster.topic("UnconfirmedBlocking", queues=1)
    too_large = Message(topic, bytes(DEFAULT_MAX_MESSAGE_BYTES + 1))
    with pytest.raises(MessageTooLargeError):
        producer.send(too_large)  # the route is not known yet: the general path
    assert producer.send(Message(topic, b"warm-up")).queue_offset == 0
    with pytest.raises(MessageTooLargeError):
        producer.send_async(too_large).result(30)
    cluster.always.append(ResponseCode.FLUSH_DISK_TIMEOUT)
    with pytest.raises(DurabilityNotConfirmedError):
        producer.send_async(Message(topic, b"never")).result(30)
    cluster.always.clear()
    assert producer.send(Message(topic, b"after")).queue_offset == 4


def test_async_and_batch_sends_raise_too(cluster: UnconfirmingCluster, producer: Producer) -> None:
    topic = cluster.topic("UnconfirmedAsyncBatch", queues=1)
    cluster.always.append(ResponseCode.FLUSH_SLAVE_TIMEOUT)
    future: Future[SendResult] = producer.send_async(Message(topic, b"async"))
    with pytest.raises(DurabilityNotConfirmedError) as from_async:
        future.result(30)
    assert from_async.value.status == "FLUSH_SLAVE_TIMEOUT"
    with pytest.raises(DurabilityNotConfirmedError) as from_batch:
        producer.send_batch([Message(topic, b"b1"), Message(topic, b"b2")])
    assert from_batch.value.status == "FLUSH_SLAVE_TIMEOUT"
    assert isinstance(from_batch.value, SparkmqError)
    cluster.always.clear()
    assert producer.send_batch([Message(topic, b"b3")]).status is SendStatus.SEND_OK


def test_a_fixed_queue_is_not_retried_elsewhere_but_still_raises(
    cluster: UnconfirmingCluster, producer: Producer
) -> None:
    topic = cluster.topic("UnconfirmedFixed", queues=2)
    producer.send(Message(topic, b"warm-up"))  # the producer learns the route
    queue = next(q for q in producer._async.instance.routes[topic].publish_queues() if q.queue_id == 1)
    before = cluster.stored(topic, 1)
    cluster.answers.append(ResponseCode.SLAVE_NOT_AVAILABLE)
    with pytest.raises(DurabilityNotConfirmedError):
        producer.send(Message(topic, b"fixed"), queue=queue)
    assert producer.send(Message(topic, b"fixed again"), queue=queue).status is SendStatus.SEND_OK
    assert cluster.stored(topic, 1) == before + 2
