"""The exactly-once streaming writer: ``.option("deliveryGuarantee", "exactly-once")`` on ``writeStream``.

Each task sends its rows as half messages tagged (query, batch, token) and reports them in a
:class:`TransactionalCommitMessage`; the driver's ``commit(N)`` records the batch's decision in the
commit log and then ends every half message of the decided tokens with END_TRANSACTION COMMIT
(the rest with ROLLBACK); ``abort(N)`` applies the same decision, which rolls back whatever the
commit log does not name. Sink producers answer the broker's check-backs from the commit log.
The rule and why it survives crashes: :mod:`sparkmq.connector.exactly_once`.

Rows travel in *batch half messages* (the broker's ``SPARKMQ_TXN_BATCH`` extension): one half
message per queue and run of up to ``batchSize`` rows, its body a SEND_BATCH body of the rows (each
row keeps its own properties, ``SPARKMQ_TXN`` among them). One END commits or rolls back the whole
run, and its COMMIT appends the rows in one store write. Only sparkmq brokers know batch half
messages: each process checks each broker once (``_check_broker``) before its first one. A half
send is never retried inside a task (a timed-out send may still be stored, under the task's token):
a failed send fails the task, and Spark's retry draws a new token. The cost against at-least-once:
one commit-log round trip per micro-batch before its rows become visible, and one END per run of rows.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import StructType

from sparkmq.client import loop_thread
from sparkmq.client.message import Message, ReceivedMessage, SendStatus
from sparkmq.client.producer import AsyncProducer
from sparkmq.client.security import ClientSecurity
from sparkmq.client.transaction_producer import AsyncTransactionProducer, LocalTransactionState
from sparkmq.connector.exactly_once import TXN_PROPERTY, CommitLog, parse_tag, query_identity, txn_tag
from sparkmq.connector.sink_options import SinkOptions
from sparkmq.errors import OptionError, SparkmqError
from sparkmq.message.batch import encode_batch_items
from sparkmq.message.layout import DEFAULT_MAX_MESSAGE_BYTES
from sparkmq.message.msgid import UniqueIdGenerator, decode_offset_msg_id
from sparkmq.message.properties import TRANSACTION_BATCH
from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.protocol.bodies import MessageQueue
from sparkmq.protocol.headers import EndTransactionRequestHeader

logger = logging.getLogger(__name__)
_RANDOM = random.Random()  # our own: library code must not move the global random state (tests seed it)
BATCH_ID_PROPERTY = "streaming.sql.batchId"  # MicroBatchExecution.BATCH_ID_KEY, a local property of every task
END_ATTEMPTS = 3
_IDS = UniqueIdGenerator()
_checked_brokers: set[tuple[str, str]] = set()  # (NameServer, broker name) seen refusing a malformed batch half
_clients: dict[tuple[str, str, ClientSecurity], tuple[AsyncTransactionProducer, CommitLog]] = {}
_clients_lock = threading.Lock()
Half = tuple[int, int, str, int]  # (half queue offset, commit log offset, msg id): what END names; + its rows
SendRun = tuple[MessageQueue, "list[Message] | bytes", int, bool]  # as sparkmq.connector.sink_send.SendRun
RunsOf = Callable[[AsyncProducer, SinkOptions, pa.RecordBatch, int, dict[str, str]], tuple[list[SendRun], int]]
"""The sink's placement (``sparkmq.connector.sink_send.place_runs``): an Arrow batch's rows, with extra
properties, in runs per queue of at most ``batchSize`` rows, in row order; and the round-robin position after them."""


@dataclass
class TransactionalCommitMessage(WriterCommitMessage):
    """One task attempt's half messages: its token, batch, rows sent, and per queue ``"topic/broker/qid"``
    the batch half messages in row order (their ENDs make them visible in that order)."""

    sent: int = 0
    token: str = ""
    batch_id: int = -1
    halves: dict[str, list[Half]] = field(default_factory=dict)


def clients(options: SinkOptions) -> tuple[AsyncTransactionProducer, CommitLog]:
    """The process's transactional producer (it answers check-backs) and commit log for the sink's cluster."""
    key = (options.namesrv_addr, options.producer_group, options.security)
    with _clients_lock:
        found = _clients.get(key)
        if found is None:
            log = CommitLog(options.namesrv_addr, options.security)

            async def check(message: ReceivedMessage) -> LocalTransactionState:
                tag = parse_tag(message.properties.get(TXN_PROPERTY))
                if tag is None:
                    logger.error(
                        "check-back of %s in group %s: no %s property, not a sparkmq sink message: UNKNOWN",
                        message.msg_id,
                        options.producer_group,
                        TXN_PROPERTY,
                    )
                    return LocalTransactionState.UNKNOWN
                state = await log.state_of(*tag)
                logger.info("check-back of %s (query %s batch %d token %s): %s", message.msg_id, *tag, state.name)
                return state

            # Uncompressed: rows are ~100 bytes of mostly random data, and zlib would cost both ends CPU.
            producer = AsyncTransactionProducer(
                options.producer_group,
                options.namesrv_addr,
                check_local=check,
                compress_over_bytes=DEFAULT_MAX_MESSAGE_BYTES + 1,
                retry_timeout_s=options.send_retry_timeout_ms / 1000,  # the commit markers (halves: never)
                security=options.security,
            )
            loop_thread.run(producer.start())
            found = _clients[key] = (producer, log)
        return found


def _half_body(payload: list[Message] | bytes) -> bytes:
    """A run's SEND_BATCH body (``Message`` runs: rows with a ``properties`` column)."""
    if isinstance(payload, bytes):
        return payload
    return encode_batch_items(
        [m.body_bytes for m in payload],
        [m.encoded_properties(_IDS.next_id()) for m in payload],
        [m.flag for m in payload],
    )


async def _check_broker(producer: AsyncTransactionProducer, queue: MessageQueue) -> None:
    """Batch half messages need sparkmq brokers: a RocketMQ broker would store one and, at its COMMIT,
    deliver the whole run of rows as one message. Once per broker and process, a batch half message
    whose body is no SEND_BATCH body must be refused (MESSAGE_ILLEGAL); one that is stored is rolled
    back and the write fails, naming the broker."""
    key = (producer.instance.namesrv_addresses[0], queue.broker_name)
    if key in _checked_brokers:
        return
    probe = Message(queue.topic, b"sparkmq batch half message probe", properties={TRANSACTION_BATCH: "true"})
    try:
        stored = await producer.send_half(probe, queue)
    except SparkmqError as exc:
        if exc.code != ResponseCode.MESSAGE_ILLEGAL:
            raise
        _checked_brokers.add(key)
        return
    half = (stored.queue_offset, decode_offset_msg_id(stored.offset_msg_id)[2], stored.msg_id, 0)
    await _end(producer, queue.broker_name, half, LocalTransactionState.ROLLBACK)
    raise SparkmqError(
        f"broker {queue.broker_name} stored a malformed batch half message instead of refusing it: "
        "it is no sparkmq broker, and deliveryGuarantee=exactly-once needs sparkmq brokers"
    )


async def _send_halves(
    producer: AsyncTransactionProducer, tag: str, runs: list[SendRun], in_flight: int, out: TransactionalCommitMessage
) -> None:
    """Send each run as one batch half message (``in_flight`` at a time); record them in ``out``."""
    for queue in {run[0].broker_name: run[0] for run in runs}.values():
        await _check_broker(producer, queue)
    slots = asyncio.Semaphore(in_flight)

    async def send(queue: MessageQueue, payload: list[Message] | bytes, rows: int) -> Half:
        carrier = Message(queue.topic, _half_body(payload), properties={TXN_PROPERTY: tag, TRANSACTION_BATCH: "true"})
        async with slots:
            result = await producer.send_half(carrier, queue)
        if result.status is not SendStatus.SEND_OK:  # FLUSH_*_TIMEOUT, SLAVE_NOT_AVAILABLE: not safely stored
            raise SparkmqError(f"half message to {queue} answered {result.status.value}")
        return result.queue_offset, decode_offset_msg_id(result.offset_msg_id)[2], result.msg_id, rows

    halves = await asyncio.gather(*(send(queue, payload, rows) for queue, payload, rows, _ordered in runs))
    for (queue, _payload, rows, _ordered), half in zip(runs, halves, strict=True):  # in row order per queue and lane
        out.halves.setdefault(f"{queue.topic}/{queue.broker_name}/{queue.queue_id}", []).append(half)
        out.sent += rows


def write_halves(
    options: SinkOptions, query: str, batch_id: int, batches: Iterator[pa.RecordBatch], runs_of: RunsOf
) -> TransactionalCommitMessage:
    """Send every row of ``batches`` in batch half messages of (query, batch_id, a new token)."""
    producer, _log = clients(options)
    out = TransactionalCommitMessage(token=uuid.uuid4().hex, batch_id=batch_id)
    tag = txn_tag(query, batch_id, out.token)
    round_robin = _RANDOM.randrange(1 << 20) * options.batch_size  # round robin from a random queue, as the sink
    for batch in batches:  # Spark's iterator is consumed here, in the task's thread, one Arrow batch at a time
        if batch.num_rows:
            runs, round_robin = runs_of(producer, options, batch, round_robin, {TXN_PROPERTY: tag})
            loop_thread.run(_send_halves(producer, tag, runs, options.max_in_flight, out))
    return out


async def _reread_routes(producer: AsyncTransactionProducer, broker_name: str) -> None:
    """Ask the NameServers anew for every cached route naming ``broker_name`` (after a failover its
    master is another broker)."""
    instance = producer.instance
    for topic, route in list(instance.routes.items()):
        if route.read_addresses(broker_name):
            try:
                await instance.route(topic, refresh=True)
            except SparkmqError:
                instance.routes.pop(topic, None)


async def _end(producer: AsyncTransactionProducer, broker_name: str, half: Half, state: LocalTransactionState) -> bool:
    header = EndTransactionRequestHeader(producer.group, half[0], half[1], state.value, half[2], False, half[2])
    for attempt in range(END_ATTEMPTS):
        try:
            response = await producer.instance.invoke_broker(
                broker_name, RequestCode.END_TRANSACTION, header.to_fields()
            )
        except SparkmqError as exc:
            logger.warning("END_TRANSACTION %s of %s (attempt %d): %s", state.name, half[2], attempt + 1, exc.remark)
            await _reread_routes(producer, broker_name)
            continue
        if response.code == ResponseCode.SUCCESS:
            return True
        logger.error("END_TRANSACTION %s of %s refused: %s", state.name, half[2], response.remark)
        return False
    return False


def settle(
    options: SinkOptions, query: str, batch_id: int, messages: list[TransactionalCommitMessage], decide: bool
) -> tuple[int, int]:
    """Apply the commit log's decision of (query, batch_id) to ``messages`` (making it first when
    ``decide``); return (committed, rolled back). An END that fails is left to the check-back."""
    producer, log = clients(options)  # not on the client loop: it may start the producer there
    return loop_thread.run(_settle(producer, log, query, batch_id, messages, decide))


async def _settle(
    producer: AsyncTransactionProducer,
    log: CommitLog,
    query: str,
    batch_id: int,
    messages: list[TransactionalCommitMessage],
    decide: bool,
) -> tuple[int, int]:
    wrong = [m.batch_id for m in messages if m.batch_id != batch_id]
    if wrong:
        raise SparkmqError(f"commit of batch {batch_id} got commit messages of batch {wrong[0]}")
    tokens = {m.token for m in messages if m.sent}
    if decide and tokens:
        decided = await log.decide(producer, query, batch_id, tokens)
    else:
        decided = await log.decided(query, batch_id) or frozenset()
    counts = [0, 0]
    failed = 0

    async def end_queue(key: str, halves: list[Half], state: LocalTransactionState) -> None:
        nonlocal failed
        broker_name = key.split("/")[-2]
        for half in halves:  # one queue's ENDs in row order: they append to the queue in this order
            if not await _end(producer, broker_name, half, state):
                failed += 1
        counts[state is LocalTransactionState.ROLLBACK] += sum(half[3] for half in halves)

    await asyncio.gather(
        *(
            end_queue(
                key, halves, LocalTransactionState.COMMIT if m.token in decided else LocalTransactionState.ROLLBACK
            )
            for m in messages
            for key, halves in m.halves.items()
        )
    )
    if failed:
        logger.warning(
            "batch %d of query %s: %d ENDs failed; the broker's check-back will end them the same way",
            batch_id,
            query,
            failed,
        )
    return counts[0], counts[1]


class TransactionalWriter:
    """What ``writeStream...option("deliveryGuarantee", "exactly-once")`` does: the stream writer's
    ``write``/``commit``/``abort``, given the sink's placement of rows (picklable)."""

    def __init__(
        self, options: SinkOptions, schema: StructType, checkpoint_location: str | None, runs_of: RunsOf
    ) -> None:
        if "delayLevel" in schema.fieldNames():
            raise OptionError(
                "deliveryGuarantee",
                "exactly-once cannot send a delayLevel column: transactional messages are not delayed",
            )
        if not checkpoint_location:
            raise OptionError(
                "deliveryGuarantee",
                "exactly-once needs .option('checkpointLocation', ...) on the "
                "writeStream: the query is known on the broker by its checkpoint",
            )
        self.options = options
        self.query = query_identity(checkpoint_location)
        self.runs_of = runs_of

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TransactionalCommitMessage:
        """Send every row as a half message; nothing is visible until the driver's commit."""
        from pyspark import TaskContext

        context = TaskContext.get()
        batch_id = context.getLocalProperty(BATCH_ID_PROPERTY) if context is not None else None
        if batch_id is None:
            raise SparkmqError(f"exactly-once write outside a streaming micro-batch (no {BATCH_ID_PROPERTY})")
        return write_halves(self.options, self.query, int(batch_id), iterator, self.runs_of)

    def commit(self, messages: list[TransactionalCommitMessage | None], batch_id: int) -> None:
        done = [m for m in messages if m is not None]
        committed, rolled_back = settle(self.options, self.query, batch_id, done, decide=True)
        logger.info(
            "sparkmq sink: batch %d of query %s committed: %d messages visible, %d rolled back (a replay)",
            batch_id,
            self.query,
            committed,
            rolled_back,
        )

    def abort(self, messages: list[TransactionalCommitMessage | None], batch_id: int) -> None:
        done = [m for m in messages if m is not None]
        committed, rolled_back = settle(self.options, self.query, batch_id, done, decide=False)
        logger.error(
            "sparkmq sink: batch %d of query %s aborted: %d messages rolled back (%d committed: the batch was "
            "decided before); halves of failed tasks are rolled back by the check-back once the batch is decided",
            batch_id,
            self.query,
            rolled_back,
            committed,
        )


def close_clients(namesrv_addr: str) -> None:
    """Close this process's transactional producers and commit logs of ``namesrv_addr``."""
    with _clients_lock:
        closing = [key for key in _clients if key[0] == namesrv_addr]
        for key in closing:
            producer, log = _clients.pop(key)
            loop_thread.run(producer.close())
            loop_thread.run(log.close())
