"""Helpers for the Spark connector tests (tests/spark): the session builder, the cluster, query runners.

* ``build_session``: the SparkSession of a test session (``local[2,4]``: 2 cores, 4 attempts per
  task, so a failed task is retried as on a cluster), UI off, UTC session time zone, Delta Lake
  when ``make delta-jars`` fetched it;
* ``Cluster``: a NameServer and broker ``broker-a``, plus questions asked over our own protocol code
  (``RemotingClient`` + ``sparkmq.protocol``), never through the source's own broker access, so
  offset checks are independent of the code under test;
* ``Names``: fresh group / checkpoint names per test.

Streaming helpers run queries with ``foreachBatch`` collecting each batch's rows on the driver
(``collect()`` once per batch, so ``numInputRows`` counts each row once) and always stop the query.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Spark's Python workers must run this interpreter (the venv with sparkmq, pyarrow, numpy).
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

import contextlib

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql.streaming import StreamingQuery

from sparkmq.client import Message, Producer, PullConsumer, ReceivedMessage, SendResult, SendStatus
from sparkmq.client.message import decode_pull_body
from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.protocol.admin_bodies import ConsumeStats
from sparkmq.protocol.admin_headers import GetConsumeStatsRequestHeader
from sparkmq.protocol.bodies import KVTable, MessageQueue
from sparkmq.protocol.headers import (
    OffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
    TopicQueueRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from sparkmq.remoting import RemotingClient
from sparkmq.tables.spark_delta import missing_jars, with_delta
from support.client_harness import create_topic, wait_for_route
from support.processes import REPO_ROOT, BrokerProcess, NamesrvProcess

BROKER = "broker-a"
QUERY_TIMEOUT_S = 120.0
# A broker with 64 KiB CommitLog segments and forced retention: every clean pass (each 10 s) deletes all
# but the newest segment (``diskSpaceCleanForciblyRatio=0``), so a topic soon loses its first offsets.
RETENTION_ARGS = (
    "--set",
    "mapedFileSizeCommitLog=65536",
    "--set",
    "deleteWhen=",
    "--set",
    "diskMaxUsedSpaceRatio=0",
    "--set",
    "diskSpaceCleanForciblyRatio=0",
)


# -- the one SparkSession --------------------------------------------------------------------------
def build_session(app: str = "sparkmq-tests") -> SparkSession:
    """The test SparkSession (also used by the subprocess driver in stream_driver.py)."""
    os.environ.setdefault("PYTHONPATH", str(REPO_ROOT))
    builder = SparkSession.builder
    if missing_jars() is None:  # one session per process: Delta's jars join it whenever they are fetched
        builder = with_delta(builder)
    spark = (
        builder.master("local[2,4]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .config("spark.task.maxFailures", "4")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@contextlib.contextmanager
def session_for_tests() -> Iterator[SparkSession]:
    """``build_session()``, its queries and itself stopped after (a test folder's session fixture)."""
    session = build_session()
    try:
        yield session
    finally:
        for query in session.streams.active:
            query.stop()
        session.stop()


# -- the cluster -----------------------------------------------------------------------------------
async def _invoke(
    address: str, code: int, fields: dict[str, str], body: bytes = b""
) -> tuple[int, str | None, dict[str, str], bytes]:
    client = RemotingClient()
    try:
        response = await client.invoke(address, code, fields, body, timeout=5.0)
    finally:
        await client.close()
    return response.code, response.remark, dict(response.ext_fields), response.body


def ask(
    address: str, code: int, fields: dict[str, str], body: bytes = b""
) -> tuple[int, str | None, dict[str, str], bytes]:
    """One request over our own RemotingClient (a fresh connection, closed after)."""
    return asyncio.run(_invoke(address, code, fields, body))


@dataclass
class Cluster:
    """A NameServer and ``broker-a``, with protocol-level questions and a producer."""

    namesrv: NamesrvProcess
    broker: BrokerProcess
    _producer: Producer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def ns(self) -> str:
        return self.namesrv.address

    def topic(self, queues: int = 4, prefix: str = "SparkT") -> str:
        """A fresh topic with ``queues`` queues, routed by the NameServer."""
        name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        self.create_topic(name, queues)
        return name

    def create_topic(self, name: str, queues: int = 4) -> None:
        create_topic([self.broker.address], name, queues)
        wait_for_route(self.ns, name, {BROKER})

    @property
    def producer(self) -> Producer:
        with self._lock:
            if self._producer is None:
                self._producer = Producer(f"PID_spark_{uuid.uuid4().hex[:6]}", self.ns)
                self._producer.start()
            return self._producer

    def send(self, messages: Sequence[Message], queue_id: int | None = None) -> list[SendResult]:
        """Send one by one (to ``queue_id`` when given, else round robin); every send must be SEND_OK."""
        results = []
        for message in messages:
            queue = None if queue_id is None else MessageQueue(message.topic, BROKER, queue_id)
            result = self._send_one(message, queue)
            assert result.status is SendStatus.SEND_OK, result
            results.append(result)
        return results

    def _send_one(self, message: Message, queue: MessageQueue | None) -> SendResult:
        if queue is None:
            return self.producer.send(message)
        return self.producer.send(message, selector=lambda queues, _m, _a: queue, arg=None)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()
            self._producer = None

    # protocol-level questions (independent of the source's own code)
    def max_offset(self, topic: str, queue_id: int) -> int:
        code, remark, fields, _ = ask(
            self.broker.address, RequestCode.GET_MAX_OFFSET, TopicQueueRequestHeader(topic, queue_id).to_fields()
        )
        assert code == ResponseCode.SUCCESS, remark
        return OffsetResponseHeader.from_fields(fields).offset

    def min_offset(self, topic: str, queue_id: int) -> int:
        code, remark, fields, _ = ask(
            self.broker.address, RequestCode.GET_MIN_OFFSET, TopicQueueRequestHeader(topic, queue_id).to_fields()
        )
        assert code == ResponseCode.SUCCESS, remark
        return OffsetResponseHeader.from_fields(fields).offset

    def committed(self, group: str, topic: str, queue_id: int) -> int:
        """QUERY_CONSUMER_OFFSET; -1 when the broker says QUERY_NOT_FOUND (as in RocketMQ, it answers 0
        for a group without an offset while the queue still begins at 0: see ``group_topics``)."""
        code, remark, fields, _ = ask(
            self.broker.address,
            RequestCode.QUERY_CONSUMER_OFFSET,
            QueryConsumerOffsetRequestHeader(group, topic, queue_id).to_fields(),
        )
        if code == ResponseCode.QUERY_NOT_FOUND:
            return -1
        assert code == ResponseCode.SUCCESS, remark
        return OffsetResponseHeader.from_fields(fields).offset

    def committed_all(self, group: str, topic: str, queues: int) -> dict[int, int]:
        return {q: self.committed(group, topic, q) for q in range(queues)}

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """UPDATE_CONSUMER_OFFSET, as any RocketMQ consumer would send it."""
        code, remark, _, _ = ask(
            self.broker.address,
            RequestCode.UPDATE_CONSUMER_OFFSET,
            UpdateConsumerOffsetRequestHeader(group, topic, queue_id, offset).to_fields(),
        )
        assert code == ResponseCode.SUCCESS, remark

    def consume_stats(self, group: str, topic: str | None) -> ConsumeStats:
        """GET_CONSUME_STATS; a None topic asks for every topic the group has offsets for."""
        code, remark, _, body = ask(
            self.broker.address, RequestCode.GET_CONSUME_STATS, GetConsumeStatsRequestHeader(group, topic).to_fields()
        )
        assert code == ResponseCode.SUCCESS, remark
        return ConsumeStats.decode(body)

    def served(self) -> int:
        """Messages the broker handed out in answers to pulls (GET_BROKER_RUNTIME_INFO's ``msgGetTotalTodayNow``)."""
        code, remark, _, body = ask(self.broker.address, RequestCode.GET_BROKER_RUNTIME_INFO, {})
        assert code == ResponseCode.SUCCESS, remark
        return int(KVTable.decode(body).table["msgGetTotalTodayNow"])

    def group_topics(self, group: str) -> set[str]:
        """Topics for which the broker holds offsets of ``group``."""
        return {mq.topic for mq in self.consume_stats(group, None).offset_table}

    def read_all(self, topic: str, queues: int) -> list[ReceivedMessage]:
        """Every stored message of ``topic``, pulled queue by queue from the broker's minimum."""
        messages: list[ReceivedMessage] = []
        with PullConsumer(f"CID_check_{uuid.uuid4().hex[:6]}", self.ns, auto_commit_interval_s=None) as consumer:
            for queue_id in range(queues):
                queue = MessageQueue(topic, BROKER, queue_id)
                offset, end = consumer.min_offset(queue), consumer.max_offset(queue)
                while offset < end:
                    result = consumer.pull_raw(queue, offset, 1024)
                    assert result.found, (queue, offset, result.status)
                    messages += decode_pull_body(result.body, BROKER)
                    offset = result.next_begin_offset
        return messages


@contextlib.contextmanager
def running_cluster(store: Path, *broker_args: str) -> Iterator[Cluster]:
    """A NameServer and a broker over ``store`` (``broker_args``: more ``sparkmq broker`` flags), stopped after."""
    with NamesrvProcess.start() as namesrv, BrokerProcess.start(store, namesrv.address, *broker_args) as broker:
        made = Cluster(namesrv, broker)
        try:
            yield made
        finally:
            made.close()


@dataclass
class Names:
    """Fresh names for one test."""

    tmp: Path
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:10])

    @property
    def group(self) -> str:
        return f"CID_spark_{self.tag}"

    def checkpoint(self, name: str = "ck") -> str:
        return str(self.tmp / name)


# -- streaming helpers -----------------------------------------------------------------------------
def reader(spark: SparkSession, cluster: Cluster, **options: object) -> Any:
    """``spark.readStream.format("sparkmq")`` with the cluster's NameServer and ``options``."""
    stream = spark.readStream.format("sparkmq").option("namesrvAddr", cluster.ns)
    for key, value in options.items():
        stream = stream.option(key, str(value))
    return stream


@dataclass
class Collected:
    """What a streaming query's foreachBatch saw: rows per batch id, in arrival order."""

    batches: dict[int, list[Row]] = field(default_factory=dict)
    order: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    on_batch: Callable[[int, list[Row]], None] | None = None

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        rows = df.collect()
        if self.on_batch is not None:
            self.on_batch(batch_id, rows)
        with self.lock:
            self.batches[batch_id] = rows
            self.order.append(batch_id)

    @property
    def rows(self) -> list[Row]:
        with self.lock:
            return [row for batch_id in sorted(self.batches) for row in self.batches[batch_id]]

    def count(self) -> int:
        with self.lock:
            return sum(len(rows) for rows in self.batches.values())


def start_query(
    df: DataFrame,
    checkpoint: str,
    collected: Collected,
    *,
    available_now: bool = False,
    processing_time: str | None = None,
) -> StreamingQuery:
    writer = df.writeStream.foreachBatch(collected).option("checkpointLocation", checkpoint)
    if available_now:
        writer = writer.trigger(availableNow=True)
    elif processing_time is not None:
        writer = writer.trigger(processingTime=processing_time)
    return writer.start()


def failure_of(query: StreamingQuery, timeout_s: float = 120.0) -> str:
    """The error text of a query that must fail (it is stopped either way)."""
    try:
        query.awaitTermination(timeout_s)
    except Exception as exc:  # noqa: BLE001 - the failure is what the caller asserts on
        return str(exc)
    finally:
        query.stop()
    raise AssertionError(f"the query did not fail within {timeout_s} s")


def run_available_now(
    df: DataFrame, checkpoint: str, collected: Collected | None = None
) -> tuple[Collected, StreamingQuery]:
    """Run to completion with Trigger.AvailableNow; fail (and stop) if it takes too long or fails."""
    collected = collected or Collected()
    query = start_query(df, checkpoint, collected, available_now=True)
    try:
        finished = query.awaitTermination(QUERY_TIMEOUT_S)
        assert finished, "AvailableNow query did not finish in time"
    finally:
        query.stop()
    return collected, query


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str, query: StreamingQuery | None = None) -> None:
    """Poll; fail naming ``what`` (or the query's own exception if it died)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if query is not None and not query.isActive:
            raise AssertionError(f"query ended before {what}: {query.exception()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.1)


def batch_progress(query: StreamingQuery) -> list[dict[str, Any]]:
    """Progress entries of batches that read something or planned a range (idle triggers dropped)."""
    return [p for p in query.recentProgress if p["sources"] and p["sources"][0].get("endOffset") is not None]


@dataclass
class BatchFiles:
    """A foreachBatch function writing each batch's rows to ``out/batch-<id>.json`` (temporary file,
    then rename): a batch replayed after a crash overwrites its own file, so the output is idempotent
    per batchId. A replay is compared first and reported via ``report`` (``replay <id> same`` or
    ``replay <id> DIFFERENT``), as is each finished file (``batch <id> <rows>``)."""

    out: Path
    report: Callable[[str], None] = print
    pause_s: float = 0.0

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        rows = sorted(
            [r.queueId, r.queueOffset, r.body.hex()] for r in df.select("queueId", "queueOffset", "body").collect()
        )
        self.out.mkdir(parents=True, exist_ok=True)
        target = self.out / f"batch-{batch_id:05d}.json"
        text = json.dumps(rows)
        if target.exists():
            self.report(f"replay {batch_id} {'same' if target.read_text() == text else 'DIFFERENT'}")
        tmp = target.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, target)
        self.report(f"batch {batch_id} {len(rows)}")
        if self.pause_s:
            time.sleep(self.pause_s)

    def rows(self) -> list[tuple[int, int, bytes]]:
        return [
            (q, o, bytes.fromhex(body))
            for path in sorted(self.out.glob("batch-*.json"))
            for q, o, body in json.loads(path.read_text())
        ]


# -- subprocess drivers (crash tests) --------------------------------------------------------------
def start_driver(script: Path, args: list[str], log: Path) -> subprocess.Popen[bytes]:
    """Run ``script`` (a Spark driver) in a session of its own, output to ``log``: SIGKILL to its
    process group (``kill_group``) takes the JVM and Python workers down too."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "tests")]), PYTHONUNBUFFERED="1")
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, str(script), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO_ROOT,
            start_new_session=True,
        )


def kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the driver's whole process group, reap the driver, and wait until the group is gone."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()

    def gone() -> bool:
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            return True
        return False

    deadline = time.monotonic() + 20
    while not gone():
        assert time.monotonic() < deadline, "processes of the killed driver's group are still alive"
        time.sleep(0.05)
