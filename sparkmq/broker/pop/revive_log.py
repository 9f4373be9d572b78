"""The POP state's replica: every change also stored in the revive log, ``rmq_sys_REVIVE_LOG_<cluster>``.

In controller mode a master stores the journal entries of each POP change (checkpoints, acks,
changed invisible times, pop offsets, FIFO attempts) as records of queue 0 of the revive log, the
topic where Apache RocketMQ 5 keeps its checkpoints and acks, so they reach the replicas with the
CommitLog; a change is answered once its record is as durable as a send (flushed under
SYNC_FLUSH, held by the SyncStateSet under SYNC_MASTER). A replica applies the records to its own
state as they arrive; the one the controller promotes applies the rest and revives what was in
flight. A record's body is a JSON array of journal entries; applying entries is idempotent (each
sets or drops one key), so a replay from an earlier offset ends in the same state.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from sparkmq.broker.context import BrokerContext
from sparkmq.broker.requeue import store_copy
from sparkmq.errors import OffsetStoreError
from sparkmq.message.properties import encode_properties
from sparkmq.message.record import MessageBatch, iter_records
from sparkmq.store import PutMessageStatus
from sparkmq.store.status import GetMessageStatus

logger = logging.getLogger(__name__)
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"  # PopAckConstants.REVIVE_GROUP: the reader named in the store's stats
ENTRIES_PER_RECORD = 1024
RECORDS_PER_READ = 256
# stored here but not confirmed by a replica: shipped, though the change it carries is not answered as durable
_STORED = (
    PutMessageStatus.PUT_OK,
    PutMessageStatus.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE,
)


def revive_topic(cluster: str) -> str:
    """``PopAckConstants.buildClusterReviveTopic``."""
    return f"rmq_sys_REVIVE_LOG_{cluster}"


class ReviveLog:
    """Ships a master's journal entries to the revive log, in order, and reads them back on a replica."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.topic = revive_topic(ctx.config.broker_cluster_name)
        self._pending: list[dict[str, Any]] = []
        self._queued = 0  # entries queued so far
        self._shipped = 0  # of them, stored in the revive log
        self._shipping: asyncio.Future[int | None] | None = None

    def queue(self, entries: tuple[dict[str, Any], ...]) -> None:
        self._pending += entries
        self._queued += len(entries)

    def drop_pending(self) -> None:
        """A demoted master's unshipped entries: its successor's log is the state from now on."""
        self._pending.clear()
        self._shipped = self._queued

    async def shipped(self) -> int | None:
        """Until every entry queued so far is stored (one put at a time; the callers that queued before
        it started share it). Returns the revive log's end after the last put, None when nothing was
        put; OffsetStoreError when a put was refused or not confirmed."""
        target = self._queued
        end = None
        while self._shipped < target:
            if self._shipping is None:
                self._shipping = asyncio.ensure_future(self._ship())
            end = await asyncio.shield(self._shipping)
        return end

    async def _ship(self) -> int | None:
        upto, pending = self._queued, self._pending
        self._pending = []
        chunks = [pending[i : i + ENTRIES_PER_RECORD] for i in range(0, len(pending), ENTRIES_PER_RECORD)]
        bodies = [json.dumps(chunk, separators=(",", ":")).encode() for chunk in chunks]
        born = int(time.time() * 1000)
        batch = MessageBatch(self.topic, 0, bodies, [encode_properties({})] * len(bodies), born_timestamp=born)
        try:
            result = await store_copy(self.ctx, self.topic, batch) if bodies else None
        finally:
            self._shipping = None
        if result is None:
            self._shipped = max(self._shipped, upto)
            return None
        if result.status not in _STORED:
            self._pending = pending + self._pending  # nothing stored: the next put carries them
        else:
            self._shipped = max(self._shipped, upto)
        if not result.ok:
            raise OffsetStoreError(
                f"the POP change is not durable: its revive log record got {result.status.value} {result.remark}"
            )
        return result.queue_offset + len(bodies)

    def end(self) -> int:
        return self.ctx.store.max_offset_in_queue(self.topic, 0)

    def start(self) -> int:
        return self.ctx.store.min_offset_in_queue(self.topic, 0)

    def read(self, offset: int) -> tuple[list[dict[str, Any]], int]:
        """The entries of the records from ``offset`` (up to RECORDS_PER_READ) and the offset after them.
        A record that is not a JSON array of objects is skipped with a warning."""
        result = self.ctx.store.get_messages(REVIVE_GROUP, self.topic, 0, offset, RECORDS_PER_READ)
        if result.status is not GetMessageStatus.FOUND:
            return [], max(offset, result.next_begin_offset)
        entries: list[dict[str, Any]] = []
        for buf in result.buffers:
            for message in iter_records(buf):
                try:
                    chunk = json.loads(bytes(message.body))
                except ValueError as exc:
                    logger.warning("%s offset %d: not JSON (%s), skipped", self.topic, message.queue_offset, exc)
                    continue
                if not isinstance(chunk, list) or not all(isinstance(e, dict) for e in chunk):
                    logger.warning("%s offset %d: not a list of entries, skipped", self.topic, message.queue_offset)
                    continue
                entries += chunk
        return entries, result.next_begin_offset
