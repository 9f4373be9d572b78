"""Exactly-once decisions for the sparkmq sink: which half messages of a streaming query become visible.

Names: ``Q`` is the query (Spark's query id from ``<checkpoint>/metadata``, the same for every
restart from that checkpoint; for a checkpoint not on the local file system, its location);
``N`` is the micro-batch id (Spark's ``streaming.sql.batchId``, seen by every task); ``T`` is a
token each task attempt draws at random. Rows go out in batch half messages (one per queue and run
of rows: one transaction each, ended as a whole), the half message and every row in it carrying the
property ``SPARKMQ_TXN = "Q N T"``: stored, invisible to consumers.

The durable record is the *commit log*: topic ``SPARKMQ_EOS_COMMITS``, the first queue of its
route. The driver's ``commit(N)`` appends a marker ``(Q, N, tokens)`` naming the task attempts
whose commit messages Spark handed over, *before* any END_TRANSACTION, and only when (Q, N) has
no marker yet.

Invariant: for each (Q, N) exactly one token set is ever decided, the one of the *first* marker of
(Q, N) in the commit log's queue order; a half message (Q, N, T) is

* committed iff T is in that set;
* rolled back iff that set exists without T, or a marker of (Q, M) with M > N exists (Spark
  commits batches in order, so N was decided, with nothing of T's);
* undecided otherwise (its batch is not committed yet): a check-back is answered UNKNOWN and
  the broker asks again later.

The driver's ENDs (commit and abort) and every sink producer's answers to the broker's
check-backs apply this one rule, so whichever comes first decides the same, and nobody guesses.

Why it holds across crashes (Spark writes ``commits/N`` only after ``commit(N)`` returns; a
re-run of N reads the very offsets of N's first run, so it produces the same rows):

* killed before the marker: nothing is decided; Spark re-runs N with new tokens, whose marker
  leaves the first run's tokens out: those halves are rolled back by the check-back.
* killed after the marker (amid the ENDs, or before ``commits/N``): Spark re-runs N; ``commit(N)``
  finds the first marker and rolls the re-run's halves back; the check-back commits what the
  first run's ENDs missed. Each row appears once, from the first run.
* killed after ``commits/N``: the check-back commits what the ENDs missed.
* a failed or speculative task attempt: its token is in no commit message, so in no marker.
* broker crash: the marker precedes the ENDs in the commit log, so with the commit log topic on the
  brokers of the data a surviving commit implies a surviving marker (SYNC_FLUSH loses neither).

Requirements: ``transactionCheckMax`` × ``transactionCheckInterval`` on the brokers must outlast any
outage of the query (the broker discards a half message checked more often); the commit log topic
must keep its markers as long as half messages may be checked (retention).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from urllib.parse import urlparse

from sparkmq.client.instance import ClientInstance
from sparkmq.client.message import Message, SendStatus, decode_pull_body
from sparkmq.client.producer import AsyncProducer
from sparkmq.client.pull_consumer import AsyncPullConsumer
from sparkmq.client.security import ClientSecurity
from sparkmq.client.send_frames import DEFAULT_TOPIC_QUEUE_NUMS
from sparkmq.client.transaction_producer import LocalTransactionState
from sparkmq.errors import SparkmqError, TopicNotExistError
from sparkmq.message.names import AUTO_CREATE_TOPIC_KEY
from sparkmq.protocol import ResponseCode
from sparkmq.protocol.bodies import MessageQueue

logger = logging.getLogger(__name__)
TXN_PROPERTY = "SPARKMQ_TXN"
COMMIT_LOG_TOPIC = "SPARKMQ_EOS_COMMITS"
READER_GROUP = "sparkmq-eos-commit-log-reader"
READ_BATCH = 256


def query_identity(checkpoint_location: str) -> str:
    """Q: Spark's query id from the checkpoint's ``metadata`` file when the checkpoint is local,
    else a digest of the location (the same for every restart from that checkpoint either way)."""
    location = checkpoint_location.rstrip("/")
    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        metadata = os.path.join(parsed.path if parsed.scheme else location, "metadata")
        try:
            with open(metadata, encoding="utf-8") as f:
                return str(json.loads(f.readline())["id"])
        except FileNotFoundError:
            pass  # Spark writes it when the query starts; a writer made before that uses the location
    return "ckpt-" + hashlib.sha1(location.encode()).hexdigest()[:24]


async def commit_log_queue(instance: ClientInstance) -> MessageQueue:
    """The commit log's queue: the first of the topic's route (of TBW102's brokers until a marker
    created the topic there), the same for writers and readers."""
    route = await instance.publish_route(COMMIT_LOG_TOPIC, AUTO_CREATE_TOPIC_KEY, DEFAULT_TOPIC_QUEUE_NUMS)
    return min(route.publish_queues(), key=lambda q: (q.broker_name, q.queue_id))


def txn_tag(query: str, batch_id: int, token: str) -> str:
    """The ``SPARKMQ_TXN`` value of a half message."""
    return f"{query} {batch_id} {token}"


def parse_tag(value: str | None) -> tuple[str, int, str] | None:
    """(Q, N, T) of a ``SPARKMQ_TXN`` value, or None when it is not one."""
    parts = (value or "").split(" ")
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    return parts[0], int(parts[1]), parts[2]


@dataclass
class CommitLog:
    """The markers of every query on one cluster, read incrementally from the commit log topic."""

    namesrv_addr: str
    security: ClientSecurity | None = None
    _reader: AsyncPullConsumer | None = None
    _queue: MessageQueue | None = None
    _next_offset: int = 0
    _decided: dict[tuple[str, int], frozenset[str]] = field(default_factory=dict)
    _latest: dict[str, int] = field(default_factory=dict)
    _lock: asyncio.Lock | None = None
    _generation: int = 0  # refreshes done

    async def _refresh(self) -> None:
        if self._reader is None:
            self._reader = AsyncPullConsumer(
                READER_GROUP, self.namesrv_addr, auto_commit_interval_s=None, security=self.security
            )
            await self._reader.instance.start()
        if self._queue is None:
            self._queue = await commit_log_queue(self._reader.instance)
        while True:
            try:
                result = await self._reader.pull_raw(self._queue, self._next_offset, READ_BATCH)
            except TopicNotExistError:
                return  # no query ever committed a batch on this cluster
            if result.status == ResponseCode.PULL_OFFSET_MOVED:
                logger.warning(
                    "commit log %s: offsets before %d are gone (retention)", self._queue, result.next_begin_offset
                )
            elif not result.found:
                return
            for message in decode_pull_body(result.body, self._queue.broker_name) if result.found else []:
                self._apply(message.body)
            self._next_offset = result.next_begin_offset

    def _apply(self, body: bytes) -> None:
        try:
            marker = json.loads(body)
            key = (str(marker["query"]), int(marker["batch"]))
            tokens = frozenset(str(t) for t in marker["tokens"])
        except (ValueError, KeyError, TypeError) as exc:
            logger.error("commit log: a record that is no marker was skipped (%s): %r", exc, body[:200])
            return
        self._decided.setdefault(key, tokens)  # the first marker of (Q, N) wins
        self._latest[key[0]] = max(self._latest.get(key[0], -1), key[1])

    async def _locked_refresh(self, fresh: bool) -> None:
        if self._lock is None:
            self._lock = asyncio.Lock()
        generation = self._generation
        async with self._lock:
            # A refresh that ran while we waited will do unless the caller needs one begun after its call:
            # a stale view only ever answers UNKNOWN where a fresh one decides (markers are never undone).
            if fresh or generation == self._generation:
                await self._refresh()
                self._generation += 1

    async def decided(self, query: str, batch_id: int, fresh: bool = True) -> frozenset[str] | None:
        """The tokens decided for (Q, N), None while it has no marker (``fresh``: read after this call)."""
        await self._locked_refresh(fresh)
        return self._decided.get((query, batch_id))

    async def decide(self, producer: AsyncProducer, query: str, batch_id: int, tokens: set[str]) -> frozenset[str]:
        """Append the marker of (Q, N) unless it has one; return the decided tokens (the first marker's)."""
        earlier = await self.decided(query, batch_id)
        if earlier is not None:
            return earlier
        body = json.dumps({"query": query, "batch": batch_id, "tokens": sorted(tokens)}).encode()
        queue = self._queue or await commit_log_queue(producer.instance)
        result = await producer.send(Message(COMMIT_LOG_TOPIC, body, keys=query), queue=queue)
        if result.status is not SendStatus.SEND_OK:
            raise SparkmqError(
                f"the commit marker of batch {batch_id} of query {query} was not stored safely: {result.status.value}"
            )
        found = await self.decided(query, batch_id)  # read back: an earlier marker would win over ours
        if found is None:
            raise SparkmqError(
                f"the commit marker of batch {batch_id} of query {query} was stored at "
                f"{result.queue_offset} but is not readable from {self._queue}"
            )
        return found

    async def state_of(self, query: str, batch_id: int, token: str) -> LocalTransactionState:
        """The invariant's answer for the half message (Q, N, T)."""
        tokens = await self.decided(query, batch_id, fresh=False)  # many checks at once share one read
        if tokens is not None:
            return LocalTransactionState.COMMIT if token in tokens else LocalTransactionState.ROLLBACK
        if self._latest.get(query, -1) > batch_id:
            return LocalTransactionState.ROLLBACK
        return LocalTransactionState.UNKNOWN

    async def close(self) -> None:
        if self._reader is not None:
            await self._reader.instance.close()
            self._reader = None
