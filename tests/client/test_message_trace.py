"""Message trace: sparkmq clients with ``enable_msg_trace`` against a real broker with ``traceTopicEnable``,
read back by ``sparkmq admin queryMsgTraceById`` (mqadmin's output) and by ``message_traces``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sparkmq.cli.main import main
from sparkmq.client import (
    ConsumeResult,
    LocalTransactionState,
    Message,
    ReceivedMessage,
    TransactionProducer,
    loop_thread,
)
from sparkmq.client.admin_ext import AdminExt
from sparkmq.client.trace_data import TRANS_MSG_HALF, TraceType
from sparkmq.client.trace_query import MessageTraces, message_traces
from support.client_harness import Clients, create_topic, route_brokers, wait_for, wait_for_route
from support.processes import BrokerProcess, NamesrvProcess

pytestmark = pytest.mark.timeout(120)
CUSTOM_TOPIC = "TRACE_CUSTOM"


@dataclass(frozen=True)
class Cluster:
    ns: str
    broker: str

    def topic(self) -> str:
        name = f"T_{uuid.uuid4().hex[:8]}"
        create_topic([self.broker], name, 2)
        wait_for_route(self.ns, name, {"broker-a"})
        return name


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    store: Path = tmp_path_factory.mktemp("trace-store")
    with (
        NamesrvProcess.start() as namesrv,
        BrokerProcess.start(store, namesrv.address, "--set", "traceTopicEnable=true") as broker,
    ):
        yield Cluster(namesrv.address, broker.address)


def traces(ns: str, msg_id: str, topic: str | None = None) -> MessageTraces:
    async def query() -> MessageTraces:
        async with AdminExt(ns) as admin:
            return await message_traces(admin, msg_id, topic)

    return loop_thread.run(query())


def kinds(ns: str, msg_id: str, topic: str | None = None) -> list[TraceType]:
    return sorted((v.trace_type for v in traces(ns, msg_id, topic).views), key=lambda t: t.value)


def admin_out(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code = main(["admin", *args])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out


def test_the_broker_creates_the_trace_topic_at_start(cluster: Cluster) -> None:
    assert route_brokers(cluster.ns, "RMQ_SYS_TRACE_TOPIC") == {"broker-a"}


def test_pub_and_sub_traces_read_back_by_query_msg_trace_by_id(
    cluster: Cluster, clients: Clients, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = cluster.topic()
    got: list[ReceivedMessage] = []

    def consume(message: ReceivedMessage) -> ConsumeResult:
        got.append(message)
        return ConsumeResult.SUCCESS

    consumer = clients.push("CID_traced", cluster.ns, topic, consume, enable_msg_trace=True)
    producer = clients.producer("PID_traced", cluster.ns, enable_msg_trace=True)
    result = producer.send(Message(topic, b"traced", tags="books", keys=["order-1", "order-2"]))
    wait_for(lambda: any(m.msg_id == result.msg_id for m in got), 20, "the traced message consumed")
    expected = [TraceType.PUB, TraceType.SUB_AFTER, TraceType.SUB_BEFORE]
    wait_for(lambda: kinds(cluster.ns, result.msg_id) == expected, 20, "Pub, SubBefore and SubAfter traces")

    tracer, consumer_tracer = producer.tracer, consumer.tracer
    assert tracer is not None and consumer_tracer is not None
    wait_for(lambda: tracer.sent == 1, 10, "the trace message's acknowledgement")
    assert (tracer.dropped, tracer.failed, consumer_tracer.dropped, consumer_tracer.failed) == (0, 0, 0, 0)
    views = {v.trace_type: v for v in traces(cluster.ns, result.msg_id).views}
    pub = views[TraceType.PUB]
    assert (pub.group, pub.topic, pub.tags, pub.keys, pub.status) == (
        "PID_traced", topic, "books", "order-1 order-2", "success",
    )  # fmt: skip
    assert pub.offset_msg_id == result.offset_msg_id and pub.store_host == cluster.broker
    assert pub.context.beans[0].body_length == len(b"traced")
    after = views[TraceType.SUB_AFTER]
    assert (after.group, after.success, after.context.context_code) == ("CID_traced", True, 0)
    assert after.context.request_id == views[TraceType.SUB_BEFORE].context.request_id

    out = admin_out(capsys, "queryMsgTraceById", "-n", cluster.ns, "-i", result.msg_id).splitlines()
    assert out[0].split() == ["#Type", "#ProducerGroup", "#ClientHost", "#SendTime", "#CostTimes", "#Status"]
    assert out[1].split()[:3] == ["Pub", "PID_traced", "127.0.0.1"] and out[1].split()[-1] == "success"
    assert out[3].split() == ["#Type", "#ConsumerGroup", "#ClientHost", "#ConsumerTime", "#CostTimes", "#Status"]
    assert out[4].split()[:2] == ["Sub", "CID_traced"] and out[4].split()[-1] == "success"
    # the message keys index the traces too, as Java's TraceTransferBean keys
    assert traces(cluster.ns, "order-1").views == []  # records are filtered by the traced id, as TraceView does


def test_a_failed_listener_call_is_traced_as_failed(cluster: Cluster, clients: Clients) -> None:
    topic = cluster.topic()
    calls: list[str] = []

    def refuse_once(message: ReceivedMessage) -> ConsumeResult | None:
        calls.append(message.msg_id)
        return None if len(calls) == 1 else ConsumeResult.SUCCESS  # None: RETURNNULL, retried later

    clients.push("CID_refusing", cluster.ns, topic, refuse_once, enable_msg_trace=True)
    result = clients.producer("PID_plain", cluster.ns).send(Message(topic, b"x"))
    wait_for(lambda: calls[:1] == [result.msg_id], 20, "the first listener call")
    wait_for(
        lambda: any(v.trace_type is TraceType.SUB_AFTER for v in traces(cluster.ns, result.msg_id).views),
        20,
        "a SubAfter trace",
    )
    first = next(v for v in traces(cluster.ns, result.msg_id).views if v.trace_type is TraceType.SUB_AFTER)
    assert (first.success, first.context.context_code) == (False, 3)  # ConsumeReturnType.RETURNNULL


def test_transaction_and_lite_pull_traces(cluster: Cluster, clients: Clients) -> None:
    topic = cluster.topic()
    producer = TransactionProducer(
        "PID_tx_traced",
        cluster.ns,
        execute_local=lambda message, arg: LocalTransactionState.COMMIT,
        check_local=lambda message: LocalTransactionState.COMMIT,
        enable_msg_trace=True,
    )
    producer.start()
    try:
        half, state = producer.send_in_transaction(Message(topic, b"tx", keys=["pay-1"]))
    finally:
        producer.close()  # flushes the queued trace records
    assert state is LocalTransactionState.COMMIT
    reader = clients.pull("CID_lite", cluster.ns, enable_msg_trace=True)
    reader.subscribe(topic)
    got: list[ReceivedMessage] = []
    wait_for(lambda: bool(got.extend(reader.poll(0.5))) or any(m.msg_id == half.msg_id for m in got), 20, "a poll")
    expected = [TraceType.END_TRANSACTION, TraceType.PUB, TraceType.SUB_AFTER, TraceType.SUB_BEFORE]
    wait_for(lambda: kinds(cluster.ns, half.msg_id) == expected, 20, "Pub, EndTransaction and lite pull traces")
    views = {v.trace_type: v for v in traces(cluster.ns, half.msg_id).views}
    assert views[TraceType.PUB].context.beans[0].msg_type == TRANS_MSG_HALF
    end = views[TraceType.END_TRANSACTION].context.beans[0]
    assert (end.transaction_state, end.transaction_id, end.from_transaction_check) == (
        "COMMIT_MESSAGE", half.msg_id, False,
    )  # fmt: skip
    assert views[TraceType.SUB_AFTER].group == "CID_lite"


def test_a_customized_trace_topic(cluster: Cluster, clients: Clients, capsys: pytest.CaptureFixture[str]) -> None:
    topic = cluster.topic()
    create_topic([cluster.broker], CUSTOM_TOPIC, 1)
    wait_for_route(cluster.ns, CUSTOM_TOPIC, {"broker-a"})
    producer = clients.producer("PID_custom", cluster.ns, enable_msg_trace=True, customized_trace_topic=CUSTOM_TOPIC)
    result = producer.send(Message(topic, b"custom"))
    wait_for(lambda: kinds(cluster.ns, result.msg_id, CUSTOM_TOPIC) == [TraceType.PUB], 20, "a Pub trace")
    assert traces(cluster.ns, result.msg_id).views == []
    out = admin_out(capsys, "queryMsgTraceById", "-n", cluster.ns, "-i", result.msg_id, "-t", CUSTOM_TOPIC)
    assert out.splitlines()[1].split()[:2] == ["Pub", "PID_custom"]


def test_a_damaged_trace_body_is_named_and_the_others_still_print(
    cluster: Cluster, clients: Clients, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = cluster.topic()
    result = clients.producer("PID_damaged", cluster.ns, enable_msg_trace=True).send(Message(topic, b"x"))
    wait_for(lambda: kinds(cluster.ns, result.msg_id) == [TraceType.PUB], 20, "a Pub trace")
    plain = clients.producer("PID_vandal", cluster.ns)
    plain.send(
        Message("RMQ_SYS_TRACE_TOPIC", f"Pub\x01not-a-time\x01{result.msg_id}\x02".encode(), keys=[result.msg_id])
    )
    wait_for(lambda: len(traces(cluster.ns, result.msg_id).damaged) == 1, 20, "the damaged trace message indexed")
    out = admin_out(capsys, "queryMsgTraceById", "-n", cluster.ns, "-i", result.msg_id).splitlines()
    assert out[1].split()[:2] == ["Pub", "PID_damaged"]
    assert out[-1].startswith("#Damaged trace message ") and "fields, needs 13" in out[-1]


def test_trace_sends_that_fail_are_counted_and_the_traced_send_succeeds(cluster: Cluster, clients: Clients) -> None:
    topic = cluster.topic()
    # no producer may send to the half topic: every trace message is refused with NO_PERMISSION
    producer = clients.producer(
        "PID_refused", cluster.ns, enable_msg_trace=True, customized_trace_topic="RMQ_SYS_TRANS_HALF_TOPIC"
    )
    tracer = producer.tracer
    assert tracer is not None
    for i in range(3):
        assert producer.send(Message(topic, f"m{i}".encode())).queue_offset >= 0
    wait_for(lambda: tracer.failed >= 1, 20, "a refused trace message counted")
    assert tracer.sent == 0
