"""Bad input to the gRPC endpoint: each answered with a status and a reason; the server keeps serving.

Raw gRPC calls with the published stubs (the ``grpc`` extra) to the package's broker subprocess (``grpc_broker``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

try:
    import grpc
    from rocketmq.grpc_protocol import definition_pb2 as pb
    from rocketmq.grpc_protocol import service_pb2 as spb
    from rocketmq.grpc_protocol import service_pb2_grpc
except ImportError as exc:  # loud: these tests need what the broker's endpoint needs
    raise ImportError(f"{exc}: tests/grpc need the `grpc` extra in .venv (`make venv` installs it)") from exc

from support.grpc_broker import GrpcBroker
from support.processes import wait_until

SEND = "/apache.rocketmq.v2.MessagingService/SendMessage"


@pytest.fixture(scope="module")
def broker(grpc_broker: GrpcBroker) -> GrpcBroker:
    return grpc_broker


@pytest.fixture(scope="module")
def channel(broker: GrpcBroker) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(broker.endpoint) as channel:
        yield channel


@pytest.fixture
def stub(channel: grpc.Channel) -> service_pb2_grpc.MessagingServiceStub:
    return service_pb2_grpc.MessagingServiceStub(channel)


def message(topic: str, body: bytes = b"x", msg_id: str = "id-1", group_key: str = "") -> pb.Message:
    sp = pb.SystemProperties(message_id=msg_id, message_group=group_key)
    return pb.Message(topic=pb.Resource(name=topic), body=body, system_properties=sp)


def receive(stub: service_pb2_grpc.MessagingServiceStub, topic: str, group: str, **fields: object) -> list:
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group), message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1)
    )
    request.batch_size = int(fields.get("batch_size", 8))  # type: ignore[call-overload]
    request.invisible_duration.FromMilliseconds(int(fields.get("invisible_ms", 1000)))  # type: ignore[call-overload]
    request.long_polling_timeout.FromMilliseconds(int(fields.get("wait_ms", 1000)))  # type: ignore[call-overload]
    return list(stub.ReceiveMessage(request, timeout=10))


def send_ok(stub: service_pb2_grpc.MessagingServiceStub, topic: str, msg_id: str) -> None:
    response = stub.SendMessage(spb.SendMessageRequest(messages=[message(topic, msg_id=msg_id)]), timeout=10)
    assert response.status.code == pb.OK, response.status


def test_malformed_protobuf_fails_its_call_only(broker: GrpcBroker, channel: grpc.Channel, stub) -> None:
    raw = channel.unary_unary(SEND, request_serializer=None, response_deserializer=None)
    with pytest.raises(grpc.RpcError) as failed:
        raw(b"\xff\xff\xff\xff\x0f", timeout=10)
    # grpc.aio answers a request that does not parse before the servicer sees it, with the parser's reason
    assert failed.value.code() == grpc.StatusCode.UNKNOWN
    assert "Error parsing message with type 'apache.rocketmq.v2.SendMessageRequest'" in failed.value.details()
    send_ok(stub, "BadInputAfterGarbage", "after-garbage")


def test_unknown_and_malformed_receipt_handles(broker: GrpcBroker, stub) -> None:
    entries = [
        spb.AckMessageEntry(message_id="a", receipt_handle="999999 1 30000 0 0 broker-a 0 0"),
        spb.AckMessageEntry(message_id="b", receipt_handle="not a handle"),
    ]
    request = spb.AckMessageRequest(
        group=pb.Resource(name="BadGroup"), topic=pb.Resource(name="BadTopic"), entries=entries
    )
    response = stub.AckMessage(request, timeout=10)
    assert response.status.code == pb.INVALID_RECEIPT_HANDLE
    assert [e.status.code for e in response.entries] == [pb.INVALID_RECEIPT_HANDLE] * 2
    assert "acked, expired or unknown" in response.entries[0].status.message
    assert "malformed" in response.entries[1].status.message
    change = spb.ChangeInvisibleDurationRequest(
        group=pb.Resource(name="BadGroup"), topic=pb.Resource(name="BadTopic"), receipt_handle="x" * 10_000
    )
    change.invisible_duration.FromSeconds(5)
    assert stub.ChangeInvisibleDuration(change, timeout=10).status.code == pb.INVALID_RECEIPT_HANDLE


def test_expired_receipt_handle_is_refused(broker: GrpcBroker, stub) -> None:
    topic, group = "BadInputExpired", "BadInputExpiredGroup"
    send_ok(stub, topic, "expiring")
    answers = receive(stub, topic, group, invisible_ms=1000)
    [handle] = [a.message.system_properties.receipt_handle for a in answers if a.HasField("message")]
    assert wait_until(lambda: broker.max_offset(f"%RETRY%{group}") == 1, timeout_s=15)  # revived
    ack = spb.AckMessageRequest(
        group=pb.Resource(name=group),
        topic=pb.Resource(name=topic),
        entries=[spb.AckMessageEntry(message_id="expiring", receipt_handle=handle)],
    )
    response = stub.AckMessage(ack, timeout=10)
    assert response.status.code == pb.INVALID_RECEIPT_HANDLE, response


def test_wrong_topic_type_and_oversized_requests(broker: GrpcBroker, stub) -> None:
    broker.create_topic("BadInputFifoOnly", queues=2, message_type="FIFO")
    response = stub.SendMessage(spb.SendMessageRequest(messages=[message("BadInputFifoOnly")]), timeout=10)
    assert response.status.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert "accepts ['FIFO']" in response.status.message
    fifo = stub.SendMessage(spb.SendMessageRequest(messages=[message("BadInputFifoOnly", group_key="g")]), timeout=10)
    assert fifo.status.code == pb.OK
    batch = [message("BadInputHuge", msg_id=f"m{i}") for i in range(1025)]
    assert stub.SendMessage(spb.SendMessageRequest(messages=batch), timeout=10).status.code == pb.PAYLOAD_TOO_LARGE
    big = message("BadInputHuge", body=b"x" * (4 * 1024 * 1024 + 1))
    assert stub.SendMessage(spb.SendMessageRequest(messages=[big]), timeout=10).status.code == pb.MESSAGE_BODY_TOO_LARGE
    [answer] = receive(stub, "BadInputFifoOnly", "BadInputGroup", batch_size=1000)
    assert answer.status.code == pb.BAD_REQUEST and "batch size" in answer.status.message
    [answer] = receive(stub, "BadInputFifoOnly", "BadInputGroup", invisible_ms=10)
    assert answer.status.code == pb.ILLEGAL_INVISIBLE_TIME
    [answer] = receive(stub, "NoSuchTopicAnywhere", "BadInputGroup")
    assert answer.status.code == pb.TOPIC_NOT_FOUND
    send_ok(stub, "BadInputHuge", "still-serving")


def test_receive_without_messages_says_so(broker: GrpcBroker, stub) -> None:
    send_ok(stub, "BadInputEmpty", "first")
    receive(stub, "BadInputEmpty", "BadInputEmptyGroup")  # takes the one message
    answers = receive(stub, "BadInputEmpty", "BadInputEmptyGroup", wait_ms=300)  # within the call's deadline
    assert [a.status.code for a in answers] == [pb.MESSAGE_NOT_FOUND]
