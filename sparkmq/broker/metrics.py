"""Prometheus ``/metrics`` with RocketMQ 5's metric names, read lazily from :class:`BrokerStats`.

``metricsExporterType=PROM`` in broker.conf turns it on, on ``metricsPromExporterHost:
metricsPromExporterPort``. The collector runs only when scraped, on the broker's event loop
(the endpoint is a tiny asyncio HTTP server, so it reads the store and the tables from the
thread that owns them); sends and pulls pay only BrokerStats' int additions.

Names and labels follow RocketMQ 5's ``BrokerMetricsConstant`` (``cluster``, ``node_type``,
``node_id``, ``topic``, ``consumer_group``): rocketmq_messages_in_total, rocketmq_messages_out_total,
rocketmq_throughput_in_total, rocketmq_throughput_out_total, rocketmq_consumer_lag_messages,
rocketmq_consumer_connections, rocketmq_producer_connections, rocketmq_topic_number,
rocketmq_consumer_group_number, rocketmq_storage_size, rocketmq_processor_watermark. One of our own:
sparkmq_store_damaged_total (damaged store items found, by ``kind`` of file and ``outcome``:
store/damage.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from sparkmq.broker.context import BrokerContext
from sparkmq.broker.stats import RPC_LATENCY_BUCKETS_MS
from sparkmq.broker.table_topics import table_status_body
from sparkmq.protocol import code_name

logger = logging.getLogger(__name__)
MAX_REQUEST_HEAD_BYTES = 8192  # a scrape's request line and headers; anything longer is not a scraper
READ_TIMEOUT_S = 10.0
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class BrokerCollector(Collector):
    """Builds the metric families from the broker's counters and tables at scrape time."""

    def __init__(self, context: BrokerContext) -> None:
        self.ctx = context

    def collect(self) -> Iterator[Metric]:
        ctx = self.ctx
        cfg, stats = ctx.config, ctx.stats
        base = {"cluster": cfg.broker_cluster_name, "node_type": "broker", "node_id": cfg.broker_name}
        names, values = list(base), list(base.values())
        families = {
            "messages_in": CounterMetricFamily(
                "rocketmq_messages_in", "Messages stored per topic", labels=[*names, "topic"]
            ),
            "throughput_in": CounterMetricFamily(
                "rocketmq_throughput_in", "Bytes stored per topic", labels=[*names, "topic"]
            ),
            "messages_out": CounterMetricFamily(
                "rocketmq_messages_out",
                "Messages pulled per topic and group",
                labels=[*names, "topic", "consumer_group"],
            ),
            "throughput_out": CounterMetricFamily(
                "rocketmq_throughput_out",
                "Bytes pulled per topic and group",
                labels=[*names, "topic", "consumer_group"],
            ),
        }
        for topic, count in list(stats.topic_put_nums.items()):
            families["messages_in"].add_metric([*values, topic], count)
            families["throughput_in"].add_metric([*values, topic], stats.topic_put_bytes.get(topic, 0))
        for (topic, group), count in list(stats.group_get_nums.items()):
            families["messages_out"].add_metric([*values, topic, group], count)
            families["throughput_out"].add_metric([*values, topic, group], stats.group_get_bytes.get((topic, group), 0))
        yield from families.values()
        yield self._damage(names, values)
        yield self._lag(names, values)
        yield self._rpc_latency(names, values)
        yield from self._gauges(names, values)
        if ctx.tables is not None:
            yield from self._tables(names, values)

    def _rpc_latency(self, names: list[str], values: list[str]) -> Metric:
        family = HistogramMetricFamily(
            "rocketmq_rpc_latency",
            "Time to serve a remoting request (milliseconds)",
            labels=[*names, "protocol_type", "request_code", "response_code"],
            unit="",
        )
        for (request, response), row in sorted(self.ctx.stats.rpc_latency.items()):
            cumulative, buckets = 0.0, []
            for bound, count in zip((*RPC_LATENCY_BUCKETS_MS, float("inf")), row[:-1], strict=True):
                cumulative += count
                buckets.append(("+Inf" if bound == float("inf") else f"{bound:g}", cumulative))
            labels = [
                *values,
                "remoting",
                code_name(request, response=False).lower(),
                code_name(response, response=True).lower(),
            ]
            family.add_metric(labels, buckets, row[-1])
        return family

    def _damage(self, names: list[str], values: list[str]) -> Metric:
        damaged = CounterMetricFamily(
            "sparkmq_store_damaged",
            "Damaged store items found (ConsumeQueue units, IndexFile entries, CommitLog records), by outcome",
            labels=[*names, "kind", "outcome"],
        )
        for (kind, outcome), count in sorted(self.ctx.store.damage.counts().items()):
            damaged.add_metric([*values, kind, outcome], count)
        return damaged

    def _lag(self, names: list[str], values: list[str]) -> Metric:
        lag = GaugeMetricFamily(
            "rocketmq_consumer_lag_messages",
            "Messages not consumed yet per topic and group",
            labels=[*names, "topic", "consumer_group"],
        )
        store, offsets = self.ctx.store, self.ctx.offsets
        for (topic, group), committed in sorted(offsets.snapshot().items()):
            config = self.ctx.topics.get(topic)
            if config is None:
                continue
            behind = sum(
                max(store.max_offset_in_queue(topic, q) - committed.get(q, 0), 0) for q in range(config.read_queue_nums)
            )
            lag.add_metric([*values, topic, group], behind)
        return lag

    def _tables(self, names: list[str], values: list[str]) -> Iterator[Metric]:
        writer = self.ctx.tables
        assert writer is not None
        families = _table_families(names)
        for topic in sorted(writer.statuses):
            status = table_status_body(writer, topic)
            if status is None:
                continue
            for lag in status.queues:
                families["messages"].add_metric([*values, topic, str(lag.queue_id)], lag.lag_messages)
                families["seconds"].add_metric([*values, topic, str(lag.queue_id)], lag.lag_seconds)
            families["stalled"].add_metric([*values, topic, status.reason], int(status.state == "stalled"))
        families["held"].add_metric(values, self.ctx.store.retention.held_segments)
        yield from families.values()

    def _gauges(self, names: list[str], values: list[str]) -> Iterator[Metric]:
        ctx = self.ctx
        yield _gauge("rocketmq_topic_number", "Topics on the broker", names, values, len(ctx.topics.topics))
        yield _gauge(
            "rocketmq_consumer_group_number", "Consumer groups on the broker", names, values, len(ctx.groups.groups)
        )
        yield _gauge(
            "rocketmq_storage_size",
            "CommitLog bytes held",
            names,
            values,
            ctx.store.commitlog.max_offset - ctx.store.commitlog.min_offset,
        )
        yield _gauge(
            "rocketmq_processor_watermark", "Pull requests parked for long polling", names, values, ctx.holds.parked
        )
        consumers = GaugeMetricFamily(
            "rocketmq_consumer_connections", "Consumer connections per group", labels=[*names, "consumer_group"]
        )
        for group, info in list(ctx.clients.consumers.items()):
            consumers.add_metric([*values, group], len(info.channels))
        yield consumers
        producers = GaugeMetricFamily(
            "rocketmq_producer_connections", "Producer connections per group", labels=[*names, "producer_group"]
        )
        for group, channels in list(ctx.clients.producers.items()):
            producers.add_metric([*values, group], len(channels))
        yield producers


def _table_families(names: list[str]) -> dict[str, GaugeMetricFamily]:
    queue = [*names, "topic", "queue_id"]
    return {
        "messages": GaugeMetricFamily(
            "sparkmq_table_lag_messages", "Messages of a queue not yet in its topic's table", labels=queue
        ),
        "seconds": GaugeMetricFamily(
            "sparkmq_table_lag_seconds", "Age of the oldest message of a queue not yet in its table", labels=queue
        ),
        "stalled": GaugeMetricFamily(
            "sparkmq_table_stalled",
            "1 while a topic's table is stalled (reason label), else 0",
            labels=[*names, "topic", "reason"],
        ),
        "held": GaugeMetricFamily(
            "sparkmq_table_retention_held_segments",
            "Expired CommitLog segments retention keeps because a table has not taken them yet (disk pressure)",
            labels=names,
        ),
    }


def _gauge(name: str, doc: str, names: list[str], values: list[str], value: float) -> Metric:
    family = GaugeMetricFamily(name, doc, labels=names)
    family.add_metric(values, value)
    return family


class PromExporter:
    """``GET /metrics`` on an asyncio server; start()/close() like every other service."""

    def __init__(self, context: BrokerContext, host: str, port: int) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(BrokerCollector(context))
        self._host, self._port = host, port
        self._server: asyncio.Server | None = None

    @property
    def address(self) -> str:
        return f"{self._host}:{self._port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self._host, self._port)
        self._port = self._server.sockets[0].getsockname()[1]
        logger.info("Prometheus metrics on http://%s/metrics", self.address)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):  # not wait_for: on 3.11 it can swallow a cancel
                head = await reader.readuntil(b"\r\n\r\n")
            method, path = (head.split(b"\r\n", 1)[0].split(b" ") + [b"", b""])[:2]
            if len(head) > MAX_REQUEST_HEAD_BYTES or method != b"GET":
                status, body = b"405 Method Not Allowed", b"only GET /metrics\n"
            elif path.split(b"?")[0] != b"/metrics":
                status, body = b"404 Not Found", b"see /metrics\n"
            else:
                status, body = b"200 OK", generate_latest(self.registry)
            writer.write(
                b"HTTP/1.1 "
                + status
                + b"\r\nContent-Type: "
                + CONTENT_TYPE.encode()
                + b"\r\nContent-Length: "
                + str(len(body)).encode()
                + b"\r\nConnection: close\r\n\r\n"
                + body
            )
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError) as exc:
            logger.debug("metrics request from %s dropped: %r", writer.get_extra_info("peername"), exc)
        finally:
            writer.close()
