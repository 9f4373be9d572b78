"""Broker statistics: BrokerStats' windows, VIEW_BROKER_STATS_DATA and runtime info on the wire, and the
Prometheus ``/metrics`` endpoint (metricsExporterType=PROM) of a real broker process."""

from __future__ import annotations

import asyncio
import socket
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkmq.broker.stats import BrokerStats
from sparkmq.client.admin_ext import AdminExt
from sparkmq.client.message import Message
from sparkmq.errors import RemoteError
from support.client_harness import Clients, create_topic, wait_for_route
from support.processes import BrokerProcess, NamesrvProcess

pytestmark = pytest.mark.timeout(120)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_counters_and_minute_window_from_samples() -> None:
    clock = FakeClock()
    stats = BrokerStats(clock=clock)
    stats.put("orders", 10, 1000)
    stats.get("billing", "orders", 4, 400)
    clock.now = 10.0
    stats.sample()
    stats.put("orders", 20, 2000)
    clock.now = 20.0

    minute = stats.view("TOPIC_PUT_NUMS", "orders").stats_minute
    assert (minute.sum, minute.tps) == (30, 1.5)
    size = stats.view("TOPIC_PUT_SIZE", "orders").stats_minute
    assert (size.sum, size.avgpt) == (3000, 100.0)  # bytes per message
    assert stats.view("GROUP_GET_NUMS", "orders@billing").stats_minute.sum == 4
    assert stats.view("BROKER_PUT_NUMS", "DefaultCluster").stats_minute.sum == 30
    assert stats.tps()[0] == 1.5
    with pytest.raises(KeyError):
        stats.view("NO_SUCH_STATS", "x")


def test_the_minute_window_forgets_what_is_older_than_its_samples() -> None:
    clock = FakeClock()
    stats = BrokerStats(clock=clock)
    stats.put("orders", 100, 100)
    for _ in range(7):  # seven more samples push the one from before the put out of the window
        clock.now += 10
        stats.sample()
    assert stats.view("TOPIC_PUT_NUMS", "orders").stats_minute.sum == 0
    assert stats.view("TOPIC_PUT_NUMS", "orders").stats_hour.sum == 100


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def prom_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NamesrvProcess, BrokerProcess, int]]:
    port = _free_port()
    with (
        NamesrvProcess.start() as ns,
        BrokerProcess.start(
            tmp_path_factory.mktemp("metrics-store"),
            ns.address,
            "--set",
            "metricsExporterType=PROM",
            "--set",
            "metricsPromExporterHost=127.0.0.1",
            "--set",
            f"metricsPromExporterPort={port}",
        ) as broker,
    ):
        yield ns, broker, port


def _scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    return _samples(text)


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def _value(samples: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float:
    matching = [v for lab, v in samples.get(name, []) if all(lab.get(k) == x for k, x in labels.items())]
    assert len(matching) == 1, (name, labels, samples.get(name))
    return matching[0]


def test_metrics_endpoint_counts_sends_pulls_and_lag(prom_broker) -> None:
    ns, broker, port = prom_broker
    topic, group = f"T_{uuid.uuid4().hex[:8]}", f"CID_{uuid.uuid4().hex[:8]}"
    create_topic([broker.address], topic, 1)
    wait_for_route(ns.address, topic, {"broker-a"})
    clients = Clients()
    try:
        producer = clients.producer("PID_metrics", ns.address)
        for i in range(6):
            producer.send(Message(topic, b"x" * 100 + str(i).encode()))
        consumer = clients.pull(group, ns.address)
        queue = consumer.queues_of(topic)[0]
        consumer.assign([queue])
        got = []
        while len(got) < 4:
            got += consumer.poll(5.0, max_messages=4 - len(got))
        consumer.commit()
    finally:
        clients.close_all()

    samples = _scrape(port)
    base = {"cluster": "DefaultCluster", "node_type": "broker", "node_id": "broker-a"}
    assert _value(samples, "rocketmq_messages_in_total", topic=topic, **base) == 6
    assert _value(samples, "rocketmq_throughput_in_total", topic=topic) >= 6 * 101
    assert _value(samples, "rocketmq_messages_out_total", topic=topic, consumer_group=group) == 4
    assert _value(samples, "rocketmq_throughput_out_total", topic=topic, consumer_group=group) > 0
    assert _value(samples, "rocketmq_consumer_lag_messages", topic=topic, consumer_group=group) == 2
    assert _value(samples, "rocketmq_topic_number") >= 1
    sends = _value(samples, "rocketmq_rpc_latency_count", request_code="send_message_v2", response_code="success")
    assert sends >= 6
    assert (
        _value(
            samples, "rocketmq_rpc_latency_bucket", request_code="send_message_v2", response_code="success", le="+Inf"
        )
        == sends
    )
    assert _value(samples, "rocketmq_storage_size") > 0 and "rocketmq_processor_watermark" in samples

    async def over_the_wire() -> None:
        async with AdminExt(ns.address) as admin:
            put = await admin.view_stats(broker.address, "TOPIC_PUT_NUMS", topic)
            got_stats = await admin.view_stats(broker.address, "GROUP_GET_NUMS", f"{topic}@{group}")
            assert (put.stats_minute.sum, got_stats.stats_minute.sum) == (6, 4)
            with pytest.raises(RemoteError, match="The stats <NOPE> <x> not exist"):
                await admin.view_stats(broker.address, "NOPE", "x")
            info = await admin.runtime_info(broker.address)
            assert int(info["msgPutTotalTodayNow"]) >= 6 and len(info["putTps"].split()) == 3
            stats = await admin.consume_stats(group, topic)
            assert stats.consume_tps > 0

    asyncio.run(over_the_wire())


def test_metrics_endpoint_answers_only_get_metrics(prom_broker) -> None:
    _ns, _broker, port = prom_broker
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/nothing", timeout=10)
    assert missing.value.code == 404
    missing.value.close()


def test_timed_processor_records_codes_of_single_and_grouped_requests() -> None:
    from sparkmq.broker.stats import timed

    class Answer:
        code = 17

    class Processor:
        async def __call__(self, request: object, connection: object) -> Answer:
            if request == "boom":
                raise ValueError("bug")
            return Answer()

        def serve_group(self, requests: list[object], connection: object) -> list[object]:
            later: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
            later.set_result(Answer())
            return [Answer(), later]

    stats = BrokerStats()
    wrapped = timed(Processor(), 310, stats)
    assert asyncio.run(wrapped("ok", None)).code == 17
    with pytest.raises(ValueError):
        asyncio.run(wrapped("boom", None))
    assert sum(stats.rpc_latency[(310, 17)][:-1]) == 1 and sum(stats.rpc_latency[(310, 1)][:-1]) == 1

    async def group() -> list[object]:  # an answer given now, and one settled later: both timed
        answers = wrapped.serve_group([1, 2], None)
        await answers[1]
        await asyncio.sleep(0)  # the future's done callbacks run
        return answers

    answers = asyncio.run(group())
    assert answers[0].code == 17 and answers[1].result().code == 17
    assert sum(stats.rpc_latency[(310, 17)][:-1]) == 3
