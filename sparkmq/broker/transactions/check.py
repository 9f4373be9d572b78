"""The check-back loop (RocketMQ's ``TransactionalMessageCheckService`` + ``TransactionalMessageServiceImpl.check``).

Every ``transactionCheckInterval`` a scan walks the half queue from the ``CID_RMQ_SYS_TRANS``
progress offset. A half message whose transaction has ended is passed over; one checked
``transactionCheckMax`` times already is parked in TRANS_CHECK_MAX_TIME_TOPIC and logged; one
younger than ``transactionTimeOut`` stops the scan (those after it are younger still), and one
with ``CHECK_IMMUNITY_TIME_IN_SECONDS`` not yet passed is re-appended unchanged. Any other is
re-appended with ``TRANSACTION_CHECK_TIMES`` + 1 and its producer group is asked, oneway,
with CHECK_TRANSACTION_STATE naming the new copy; the producer answers with END_TRANSACTION.
Before asking, the index is consulted for a commit of the same transaction id: a crash between
an END's commit and its op record must not lead to a second commit.

The scan reads and writes the store, so it runs in a worker thread; the questions go out on
the event loop, to a live connection of the group known from heartbeats.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from dataclasses import dataclass
from enum import Enum

from sparkmq.broker.context import BrokerContext
from sparkmq.broker.transactions.state import (
    HALF_QUEUE_ID,
    SYSTEM_GROUP,
    TransactionState,
    check_body,
    commit_stored,
    discarded_message,
    half_copy,
    op_message,
    read_queue_records,
    transaction_id,
)
from sparkmq.message.names import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from sparkmq.message.properties import (
    CHECK_IMMUNITY_TIME_IN_SECONDS,
    PRODUCER_GROUP,
    REAL_TOPIC,
    TRANSACTION_CHECK_TIMES,
    UNIQ_KEY,
)
from sparkmq.message.record import StoredMessage
from sparkmq.protocol import RemotingCommand, RequestCode
from sparkmq.protocol.headers import CheckTransactionStateRequestHeader

logger = logging.getLogger(__name__)
MAX_SCAN_S = 60.0  # TransactionalMessageServiceImpl.MAX_PROCESS_TIME_LIMIT: one round's time budget


class _Verdict(Enum):
    NEXT = "next"  # done with this half message: the progress offset may pass it
    STOP = "stop"  # leave it (and everything after it) for a later round


@dataclass(frozen=True, slots=True)
class CheckRequest:
    """One CHECK_TRANSACTION_STATE to send: to whom, with which header and body."""

    group: str
    txid: str
    header: CheckTransactionStateRequestHeader
    body: bytes


def _int_property(message: StoredMessage, key: str) -> int | None:
    value = message.properties.get(key, "")
    return int(value) if value.isdigit() else None


class TransactionCheckService:
    """Scans half messages and asks producers about the undecided ones."""

    def __init__(self, context: BrokerContext, state: TransactionState) -> None:
        self.ctx = context
        self.state = state
        self._stopping = False
        self._scanning = threading.Lock()  # held by the worker thread while it scans
        self._topics_written: set[str] = set()  # system topics the scan wrote to (to be created in the table)

    async def check_once(self) -> int:
        """One round: scan (in a thread), then send the questions; return how many were asked."""
        requests = await asyncio.to_thread(self._scan_if_running, int(time.time() * 1000))
        self._send(requests)
        for topic in sorted(self._topics_written):  # the topic table belongs to the event loop, not the scanning thread
            self.ctx.topics.create_system_topic(topic, 1)
        return len(requests)

    def resume(self) -> None:
        """Scan again after :meth:`close` (a broker that became master again)."""
        self._stopping = False

    async def close(self) -> None:
        """Let a scan in progress finish (it stops early) so the store can close under it."""
        self._stopping = True
        await asyncio.to_thread(self._wait_idle)

    def _wait_idle(self) -> None:
        with self._scanning:
            pass

    def _scan_if_running(self, now_ms: int) -> list[CheckRequest]:
        with self._scanning:
            return [] if self._stopping else self.scan(now_ms)

    def scan(self, now_ms: int) -> list[CheckRequest]:
        """Walk the half queue from the progress offset; return the questions to ask (blocking)."""
        store, offsets = self.ctx.store, self.ctx.offsets
        offset = max(
            offsets.query(SYSTEM_GROUP, TRANS_HALF_TOPIC, HALF_QUEUE_ID),
            store.min_offset_in_queue(TRANS_HALF_TOPIC, HALF_QUEUE_ID),
        )
        op_end = store.max_offset_in_queue(TRANS_OP_HALF_TOPIC, HALF_QUEUE_ID)
        end = store.max_offset_in_queue(TRANS_HALF_TOPIC, HALF_QUEUE_ID)  # copies this round appends wait for the next
        deadline = time.monotonic() + MAX_SCAN_S
        requests: list[CheckRequest] = []
        for half in read_queue_records(store, TRANS_HALF_TOPIC, offset):
            if self._stopping or half.queue_offset >= end or time.monotonic() > deadline:
                break
            try:
                verdict = self._check_one(half, now_ms, requests)
            except Exception:  # one bad half message must not stall the queue: log it and pass over it
                logger.exception(
                    "half message at queue offset %d (commitlog %d) could not be checked; skipped",
                    half.queue_offset,
                    half.physical_offset,
                )
                verdict = _Verdict.NEXT
            if verdict is _Verdict.STOP:
                break
            offset = half.queue_offset + 1
        offsets.commit(SYSTEM_GROUP, TRANS_HALF_TOPIC, HALF_QUEUE_ID, offset)
        offsets.commit(SYSTEM_GROUP, TRANS_OP_HALF_TOPIC, HALF_QUEUE_ID, op_end)
        return requests

    def _check_one(self, half: StoredMessage, now_ms: int, requests: list[CheckRequest]) -> _Verdict:
        txid = transaction_id(half)
        if self.state.is_ended(txid):
            return _Verdict.NEXT
        if self._committed_without_op(half, txid):
            return _Verdict.NEXT
        config = self.ctx.config
        times = _int_property(half, TRANSACTION_CHECK_TIMES) or 0
        if times >= config.transaction_check_max:
            self._discard(half, txid, times)
            return _Verdict.NEXT
        age = now_ms - half.born_timestamp  # Java measures from the born time; < 0 (clock skew) checks at once
        immunity_s = _int_property(half, CHECK_IMMUNITY_TIME_IN_SECONDS)
        if immunity_s is not None and 0 <= age < immunity_s * 1000:
            # Moved behind the others (one copy a round) rather than holding up the scan as Java's does.
            return _Verdict.NEXT if self._put_back(half, times) is not None else _Verdict.STOP
        if immunity_s is None and 0 <= age < config.transaction_time_out:
            return _Verdict.STOP
        copy = self._put_back(half, times + 1)
        if copy is None:
            return _Verdict.STOP
        group = half.properties.get(PRODUCER_GROUP, "")
        uniq = half.properties.get(UNIQ_KEY)
        header = CheckTransactionStateRequestHeader(
            copy.queue_offset, copy.physical_offset, uniq, uniq, copy.offset_msg_id
        )
        requests.append(CheckRequest(group, txid, header, check_body(copy)))
        return _Verdict.NEXT

    def _committed_without_op(self, half: StoredMessage, txid: str) -> bool:
        """A commit stored without its op record (``commit_stored``): the missing op written."""
        committed = commit_stored(self.ctx.store, half)
        if committed and self.state.claim(txid):
            self._topics_written.add(TRANS_OP_HALF_TOPIC)
            result, _flushed = self.ctx.store.submit_messages(op_message(half))
            logger.warning(
                "transaction %s was committed but had no op record (a crash in between?): op written (%s)",
                txid,
                result.status.value,
            )
        return committed

    def _put_back(self, half: StoredMessage, check_times: int) -> StoredMessage | None:
        """``putBackHalfMsgQueue``: append a copy to the half queue; the copy as stored, or None."""
        result, _flushed = self.ctx.store.submit_messages(half_copy(half, check_times))
        copy = self.ctx.store.look_message_by_offset(result.wrote_offset) if result.ok else None
        if copy is None:
            logger.error(
                "half message %s could not be put back (%s %s); retried next round",
                transaction_id(half),
                result.status,
                result.remark,
            )
        return copy

    def _discard(self, half: StoredMessage, txid: str, times: int) -> None:
        self._topics_written.add(TRANS_CHECK_MAX_TIME_TOPIC)
        result, _flushed = self.ctx.store.submit_messages(discarded_message(half))
        logger.warning(
            "transaction %s of group %s (topic %s) checked %d times without an answer: discarded to %s (%s)",
            txid,
            half.properties.get(PRODUCER_GROUP),
            half.properties.get(REAL_TOPIC),
            times,
            TRANS_CHECK_MAX_TIME_TOPIC,
            result.status.value,
        )

    def _send(self, requests: list[CheckRequest]) -> None:
        """Ask each request's group, on a live connection of it chosen at random (``getAvailableChannel``)."""
        by_group: dict[str, list[CheckRequest]] = {}
        for request in requests:
            by_group.setdefault(request.group, []).append(request)
        for group, asks in by_group.items():
            channels = [
                c.connection for c in self.ctx.clients.producers.get(group, {}).values() if c.connection.is_open
            ]
            if not channels:
                logger.warning(
                    "no live producer of group %r to check %d transaction(s) (%s, ...); asking again next round",
                    group,
                    len(asks),
                    asks[0].txid,
                )
                continue
            for request in asks:
                connection = random.choice(channels)
                connection.send(
                    RemotingCommand.request(
                        RequestCode.CHECK_TRANSACTION_STATE,
                        connection.next_opaque(),
                        ext_fields=request.header.to_fields(),
                        body=request.body,
                        oneway=True,
                    )
                )
                logger.info("asked %s:%d (group %s) about transaction %s", *connection.peer, group, request.txid)
