"""The gRPC endpoint and the POP requests when the POP journal's fsync fails; streams whose client stops reading.

One in-process SYNC-flush broker with its gRPC endpoint, on a thread of its own, for the module. A
failing fsync is injected through ``sparkmq.store.disk`` (the store's seam), for the POP journal's files
only; the clients are raw gRPC stubs (a grpc.aio one that stops reading), the remoting client, and the
real 5.x Python client once the disk is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

try:
    import grpc
    from rocketmq.grpc_protocol import definition_pb2 as pb
    from rocketmq.grpc_protocol import service_pb2 as spb
    from rocketmq.grpc_protocol import service_pb2_grpc
except ImportError as exc:  # loud: these tests need what the broker's endpoint needs
    raise ImportError(f"{exc}: tests/grpc need the `grpc` extra in .venv (`make venv` installs it)") from exc

from sparkmq.broker.controller import BrokerController
from sparkmq.broker.grpc import streams
from sparkmq.message.record import iter_records
from sparkmq.protocol import RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.pop_headers import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    PopMessageRequestHeader,
)
from sparkmq.remoting import RemotingClient
from sparkmq.store import disk
from sparkmq.store.config import FlushDiskType
from support.broker_wire import small_config
from support.processes import wait_until
from support.rocketmq5 import finished, of, require_rmq5_python, run5

BIG_BODY = 1 << 20  # a receive of 32 of these is more than grpcio buffers for a client that does not read


class HostedBroker:
    """A broker on an event loop of its own thread; the test's clients reach it over loopback sockets."""

    def __init__(self, store_dir: Path) -> None:
        config = small_config(
            store_dir,
            flush_disk_type=FlushDiskType.SYNC_FLUSH,
            sync_flush_timeout=10_000,
            enable_grpc_server=True,
            grpc_server_port=0,
            mapped_file_size_commit_log=64 << 20,
        )
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="grpc-faults-broker", daemon=True)
        self.thread.start()
        self.broker = BrokerController(config)
        asyncio.run_coroutine_threadsafe(self.broker.start(), self.loop).result(60)
        self.endpoint = f"{self.broker.config.broker_ip}:{self.broker.config.grpc_server_port}"

    def close(self) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self.broker.close(), self.loop).result(60)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(30)

    def request(self, code: int, fields: dict[str, str], body: bytes = b"") -> RemotingCommand:
        async def call() -> RemotingCommand:
            client = RemotingClient()
            try:
                return await client.invoke(self.broker.config.address, code, fields, body=body)
            finally:
                await client.close()

        return asyncio.run(call())

    def create_topic(self, topic: str, queues: int = 1) -> None:
        fields = {"topic": topic, "readQueueNums": str(queues), "writeQueueNums": str(queues), "perm": "6"}
        fields |= {"defaultTopic": "TBW102", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}
        assert self.request(RequestCode.UPDATE_AND_CREATE_TOPIC, fields).code == ResponseCode.SUCCESS

    def committed(self, group: str, topic: str, queue_id: int = 0) -> int:
        fields = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id)}
        answer = self.request(RequestCode.QUERY_CONSUMER_OFFSET, fields)
        return int(answer.ext_fields["offset"]) if answer.code == ResponseCode.SUCCESS else -1


class FailingJournalSync:
    """``disk.fsync`` failing with EIO for the POP journal's files (the journal and its rewrite), counting them."""

    def __init__(self) -> None:
        self.real = disk.fsync
        self.failed = 0

    def __call__(self, fd: int) -> None:
        if "/pop/journal" in os.readlink(f"/proc/self/fd/{fd}"):
            self.failed += 1
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        self.real(fd)


@pytest.fixture(scope="module")
def hosted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostedBroker]:
    broker = HostedBroker(tmp_path_factory.mktemp("grpc-faults"))
    try:
        yield broker
    finally:
        broker.close()


@pytest.fixture(scope="module")
def stub(hosted: HostedBroker) -> Iterator[service_pb2_grpc.MessagingServiceStub]:
    with grpc.insecure_channel(hosted.endpoint, options=[("grpc.max_receive_message_length", 64 << 20)]) as channel:
        yield service_pb2_grpc.MessagingServiceStub(channel)


def send(stub: service_pb2_grpc.MessagingServiceStub, topic: str, *ids: str, body: bytes = b"x") -> None:
    messages = [
        pb.Message(topic=pb.Resource(name=topic), body=body, system_properties=pb.SystemProperties(message_id=i))
        for i in ids
    ]
    response = stub.SendMessage(spb.SendMessageRequest(messages=messages), timeout=30)
    assert response.status.code == pb.OK, response.status


def receive_request(topic: str, group: str, batch: int = 32, invisible_ms: int = 60_000) -> spb.ReceiveMessageRequest:
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group), message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1)
    )
    request.batch_size = batch
    request.invisible_duration.FromMilliseconds(invisible_ms)
    request.long_polling_timeout.FromMilliseconds(1000)
    return request


def receive(stub: service_pb2_grpc.MessagingServiceStub, topic: str, group: str, **fields: int) -> tuple[int, dict]:
    """The receive's status code and its messages' receipt handles by message id."""
    answers = list(stub.ReceiveMessage(receive_request(topic, group, **fields), timeout=30))
    handles = {a.message.system_properties.message_id: a.message.system_properties.receipt_handle for a in answers}
    handles.pop("", None)
    return next(a.status.code for a in answers if a.HasField("status")), handles


def ack(stub: service_pb2_grpc.MessagingServiceStub, topic: str, group: str, msg_id: str, handle: str) -> pb.Status:
    entries = [spb.AckMessageEntry(message_id=msg_id, receipt_handle=handle)]
    request = spb.AckMessageRequest(group=pb.Resource(name=group), topic=pb.Resource(name=topic), entries=entries)
    response = stub.AckMessage(request, timeout=30)
    assert [e.status.code for e in response.entries] == [response.status.code]
    return response.status


def change(stub: service_pb2_grpc.MessagingServiceStub, topic: str, group: str, handle: str):  # type: ignore[no-untyped-def]
    request = spb.ChangeInvisibleDurationRequest(
        group=pb.Resource(name=group), topic=pb.Resource(name=topic), receipt_handle=handle
    )
    request.invisible_duration.FromSeconds(60)
    return stub.ChangeInvisibleDuration(request, timeout=30)


def refused_for_the_journal(status: pb.Status) -> bool:
    return (
        status.code == pb.INTERNAL_SERVER_ERROR and "POP journal" in status.message and "Input/output" in status.message
    )


def test_a_failed_journal_fsync_changes_nothing_and_the_retried_rpcs_succeed(
    hosted: HostedBroker, stub, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic, group = "FaultTopic", "FaultGroup"
    hosted.create_topic(topic)
    send(stub, topic, "a0", "a1", "a2")
    code, handles = receive(stub, topic, group)
    assert code == pb.OK and sorted(handles) == ["a0", "a1", "a2"]
    fault = FailingJournalSync()
    monkeypatch.setattr(disk, "fsync", fault)
    acked = ack(stub, topic, group, "a0", handles["a0"])
    assert refused_for_the_journal(acked) and "retry" in acked.message, acked
    assert refused_for_the_journal(change(stub, topic, group, handles["a1"]).status)
    send(stub, topic, "a3")  # the CommitLog is another disk path: sends go on
    assert receive(stub, topic, group)[0] == pb.INTERNAL_SERVER_ERROR
    assert fault.failed >= 2  # the fsync, then each rewrite of the journal
    monkeypatch.undo()  # the disk is back: every retry succeeds
    assert ack(stub, topic, group, "a0", handles["a0"]).code == pb.OK
    changed = change(stub, topic, group, handles["a1"])
    assert changed.status.code == pb.OK
    assert ack(stub, topic, group, "a1", changed.receipt_handle).code == pb.OK
    assert ack(stub, topic, group, "a2", handles["a2"]).code == pb.OK
    code, handles = receive(stub, topic, group)  # the refused receive popped nothing: a3 comes now
    assert code == pb.OK and list(handles) == ["a3"]
    assert ack(stub, topic, group, "a3", handles["a3"]).code == pb.OK
    assert hosted.committed(group, topic) == 4


def test_a_failed_journal_fsync_over_remoting_answers_system_error_and_the_retries_succeed(
    hosted: HostedBroker, stub, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic, group = "FaultRemotingTopic", "FaultRemotingGroup"
    hosted.create_topic(topic)
    send(stub, topic, "r0", "r1")
    pop = PopMessageRequestHeader(group, topic, -1, 8, 60_000, 0, 0, 0, "TAG", "*").to_fields()
    monkeypatch.setattr(disk, "fsync", FailingJournalSync())
    refused = hosted.request(RequestCode.POP_MESSAGE, pop)  # the pop's fsync fails: its offsets go back
    assert refused.code == ResponseCode.SYSTEM_ERROR and "POP journal" in (refused.remark or ""), refused.remark
    monkeypatch.undo()
    popped = hosted.request(RequestCode.POP_MESSAGE, pop)
    assert popped.code == ResponseCode.SUCCESS and [m.queue_offset for m in iter_records(popped.body)] == [0, 1]
    fields = popped.ext_fields
    info = f"0 {fields['popTime']} {fields['invisibleTime']} {fields['reviveQid']} 0 broker-a 0"
    ack_r0 = AckMessageRequestHeader(group, topic, 0, info, 0).to_fields()
    change_r1 = ChangeInvisibleTimeRequestHeader(group, topic, 0, info, 1, 30_000).to_fields()
    monkeypatch.setattr(disk, "fsync", FailingJournalSync())
    for code, request in ((RequestCode.ACK_MESSAGE, ack_r0), (RequestCode.CHANGE_MESSAGE_INVISIBLETIME, change_r1)):
        answer = hosted.request(code, request)
        assert answer.code == ResponseCode.SYSTEM_ERROR and "Input/output error" in (answer.remark or ""), answer
    monkeypatch.undo()
    assert hosted.request(RequestCode.ACK_MESSAGE, ack_r0).code == ResponseCode.SUCCESS
    changed = hosted.request(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, change_r1)
    assert changed.code == ResponseCode.SUCCESS and changed.ext_fields["invisibleTime"] == "30000"
    assert hosted.committed(group, topic) == 1  # r1 is still invisible


def test_a_message_that_expires_while_the_journal_fails_is_revived_once_it_is_back(
    hosted: HostedBroker, stub, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic, group = "FaultReviveTopic", "FaultReviveGroup"
    hosted.create_topic(topic)
    send(stub, topic, "e0")
    code, handles = receive(stub, topic, group, invisible_ms=1000)
    assert code == pb.OK and list(handles) == ["e0"]
    fault = FailingJournalSync()
    monkeypatch.setattr(disk, "fsync", fault)
    assert wait_until(lambda: fault.failed >= 4, timeout_s=15)  # revive rounds met the failing journal
    retry_copies = hosted.request(RequestCode.GET_MAX_OFFSET, {"topic": f"%RETRY%{group}", "queueId": "0"})
    assert int(retry_copies.ext_fields.get("offset", "0")) <= 1  # a round the journal refused copied nothing
    monkeypatch.undo()
    assert list(receive_until_found(stub, topic, group, {"e0"})) == ["e0"]  # from the retry topic


def test_the_real_client_receives_what_a_failed_fsync_gave_back(
    hosted: HostedBroker, stub, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    require_rmq5_python()
    topic, group = "FaultClientTopic", "FaultClientGroup"
    hosted.create_topic(topic)
    send(stub, topic, "c0", "c1", "c2")
    monkeypatch.setattr(disk, "fsync", FailingJournalSync())
    assert receive(stub, topic, group)[0] == pb.INTERNAL_SERVER_ERROR  # its pop of the three was rolled back
    monkeypatch.undo()
    records = finished(run5(tmp_path, "receive", hosted.endpoint, topic, group, "3", "--timeout", "20"))
    assert sorted(r["id"] for r in of(records, "received")) == ["c0", "c1", "c2"]
    assert {r["attempt"] for r in of(records, "received")} == {1} and len(of(records, "acked")) == 3
    assert wait_until(lambda: hosted.committed(group, topic) == 3, timeout_s=10)


def test_a_receive_whose_client_stops_reading_ends_and_gives_back_what_it_did_not_take(
    hosted: HostedBroker, stub, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic, group = "StallTopic", "StallGroup"
    hosted.create_topic(topic, queues=12)  # a queue's read is 4 MiB at most: 32 big messages need several
    ids = [f"s{i}" for i in range(32)]
    for first in range(0, 32, 8):
        send(stub, topic, *ids[first : first + 8], body=b"b" * BIG_BODY)
    monkeypatch.setattr(streams, "SEND_STALL_S", 1.0)

    async def stalled() -> tuple[list[str], dict[str, str], grpc.StatusCode, str]:
        """A receive of all 32 that reads nothing until what it did not take is given back, then what it can."""
        options = [("grpc.max_receive_message_length", 64 << 20)]
        async with grpc.aio.insecure_channel(hosted.endpoint, options=options) as channel:
            call = service_pb2_grpc.MessagingServiceStub(channel).ReceiveMessage(receive_request(topic, group))
            await asyncio.wait_for(call.wait_for_connection(), 30)
            assert await asyncio.to_thread(other_client_is_served, stub, hosted)  # the broker serves others
            given_back = await asyncio.to_thread(receive_until_found, stub, topic, group)
            got = []
            with contextlib.suppress(grpc.aio.AioRpcError):
                async for answer in call:
                    got.append(answer.message.system_properties.message_id)
            return [g for g in got if g], given_back, await call.code(), await call.details()

    taken, given_back, code, details = asyncio.run(stalled())
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED and "read nothing for 1 s" in details, details
    assert 0 < len(taken) < 32  # what grpcio had buffered; the rest was never written
    if not set(ids) <= set(taken) | set(given_back):
        given_back |= receive_until_found(stub, topic, group, set(ids) - set(taken) - set(given_back))
    assert set(taken) | set(given_back) == set(ids)  # the rest is visible again a second later
    assert len(set(taken) & set(given_back)) <= 1  # the one whose write was cut may have reached the client too


def receive_until_found(
    stub: service_pb2_grpc.MessagingServiceStub, topic: str, group: str, wanted: set[str] | None = None
) -> dict[str, str]:
    """Receipt handles by message id, received until they include ``wanted`` (else: until one is received)."""
    found: dict[str, str] = {}
    for _ in range(30):
        found |= receive(stub, topic, group)[1]
        if found and (wanted is None or wanted <= set(found)):
            return found
    raise AssertionError(f"{sorted(found)} of {topic} came to {group}, not {sorted(wanted or ['any'])}")


def other_client_is_served(stub: service_pb2_grpc.MessagingServiceStub, hosted: HostedBroker) -> bool:
    hosted.create_topic("StallOtherTopic")
    send(stub, "StallOtherTopic", "o1")
    code, handles = receive(stub, "StallOtherTopic", "StallOtherGroup")
    return (
        code == pb.OK
        and list(handles) == ["o1"]
        and ack(stub, "StallOtherTopic", "StallOtherGroup", "o1", handles["o1"]).code == pb.OK
    )


def test_telemetry_streams_that_send_no_settings_or_never_read_are_ended(
    hosted: HostedBroker, stub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(streams, "SEND_STALL_S", 1.0)
    monkeypatch.setattr(streams, "FIRST_SETTINGS_S", 1.0)
    settings = pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="TeleTopic")]))
    settings.user_agent.platform = "p" * 50_000  # echoed in each answer: the client's window fills after a few
    command = spb.TelemetryCommand(settings=settings)

    async def streams_end() -> tuple[tuple[grpc.StatusCode, str], tuple[grpc.StatusCode, str]]:
        async with grpc.aio.insecure_channel(hosted.endpoint) as channel:
            service = service_pb2_grpc.MessagingServiceStub(channel)
            silent = service.Telemetry()  # sends nothing
            flooding = service.Telemetry()  # sends Settings and never reads the answers
            written = 0
            while True:
                writing = asyncio.ensure_future(flooding.write(command))
                await asyncio.wait({writing}, timeout=2.0)  # left pending: cancelling it would cancel the call
                if not writing.done() or writing.exception() is not None:
                    break  # the broker stopped reading it (its queue is full) or ended it
                written += 1
            assert written > streams.TELEMETRY_QUEUE
            assert await asyncio.to_thread(other_client_is_served, stub, hosted)
            ends = []
            for call in (silent, flooding):
                with contextlib.suppress(grpc.aio.AioRpcError):
                    async for _ in call:  # the status comes after what the client had not read
                        pass
                ends.append((await call.code(), await call.details()))
            await asyncio.wait({writing})
            return ends[0], ends[1]

    silent, flooding = asyncio.run(streams_end())
    assert silent == (grpc.StatusCode.DEADLINE_EXCEEDED, "no Settings within 1 s")
    assert flooding == (grpc.StatusCode.DEADLINE_EXCEEDED, "the client read nothing for 1 s")
