"""PopService: pop with an invisible time, ack, change the invisible time, revive the expired.

RocketMQ 5's PopMessageProcessor / AckMessageProcessor / ChangeInvisibleTimeProcessor /
PopReviveService over one journal (``journal.py``) instead of the CK/ACK system topics. A pop
reads from the group's pop offset of each queue (the topic's and the group's retry topic),
records a checkpoint per message and advances the offset; the group's committed offset (what
``consumerProgress`` shows, shared with 4.x consumers) is the smallest offset still invisible.
A message whose invisible time passes unacked goes to ``%RETRY%group`` with its reconsume
times + 1, or to ``%DLQ%group`` after ``retryMaxTimes``. FIFO groups (ConsumerOrderInfoManager's
shape): a queue with an unacked message is locked for the group, so a message group (hashed to one
queue) keeps its order; an expired message is redelivered in place with its attempt count journaled,
and goes to ``%DLQ%group`` once it has expired ``retryMaxTimes + 1`` times.

Each operation costs O(log n) in the messages in flight: a handle names its checkpoint, a queue's
in-flight messages are kept by offset in ascending order, and revive takes the expired from a heap
by deadline. The journal's fsync (SYNC_FLUSH) is awaited once per request (``durable``), off the loop.

Only a master pops, acks and revives. In controller mode every change is also stored in the revive
log (``revive_log.py``) before it is answered; a replica applies that log (``follow``) and, once
promoted, revives what its predecessor had in flight, at the same deadlines and with their attempts.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import Any

from sparkmq.broker.context import BrokerContext
from sparkmq.broker.pop.handle import ReceiptHandle
from sparkmq.broker.pop.journal import Inflight, PopJournal, PopState, QueueKey
from sparkmq.broker.pop.revive_log import ReviveLog
from sparkmq.broker.requeue import message_copy, store_copy
from sparkmq.errors import InvalidReceiptHandleError
from sparkmq.message.names import dlq_topic, retry_topic
from sparkmq.message.properties import (
    DELAY_TIME_LEVEL,
    ORIGIN_MESSAGE_ID,
    RETRY_TOPIC,
    TAGS,
)
from sparkmq.message.record import StoredMessage, iter_records
from sparkmq.store import PutMessageStatus
from sparkmq.store.status import GetMessageStatus

logger = logging.getLogger(__name__)
MAX_POP_NUMS = 32  # PopMessageRequestHeader maxMsgNums is at most 32 in RocketMQ 5
MIN_INVISIBLE_MS = 1_000
MAX_INVISIBLE_MS = 12 * 3600 * 1000  # the proxy's maxInvisibleTimeMills: 12 h


@dataclass(frozen=True, slots=True)
class Popped:
    """A popped message: the stored record, its handle and the topic the consumer subscribed to."""

    message: StoredMessage
    handle: ReceiptHandle
    origin_topic: str
    record: bytes  # the stored record as is (the body of a remoting POP_MESSAGE answer)

    @property
    def delivery_attempt(self) -> int:
        return self.message.reconsume_times + 1


def tags_match(message: StoredMessage, tags: Collection[str] | None) -> bool:
    """A TAG subscription: None or ``*`` takes every message."""
    if tags is None or "*" in tags:
        return True
    return message.properties.get(TAGS, "") in tags


def _with_records(buffers: list[bytes]) -> Iterator[tuple[StoredMessage, bytes]]:
    """Each record of a read, decoded and as its bytes."""
    for buf in buffers:
        pos = 0
        for message in iter_records(buf):
            yield message, bytes(buf[pos : pos + message.total_size])
            pos += message.total_size


class PopService:
    """The POP state of one broker; every method runs on the broker's event loop."""

    def __init__(
        self,
        ctx: BrokerContext,
        journal: PopJournal,
        clock: Callable[[], float] = time.time,
        log: ReviveLog | None = None,
    ) -> None:
        self.ctx = ctx
        self.journal = journal
        self.clock = clock
        self.log = log  # controller mode: the changes replicated through the revive log
        self._truncations = ctx.store.truncations  # a change: the applied revive log may have lost its tail
        self._followed = False  # the state changed by follow() since it was last indexed
        self._noted = 0  # the revive log offset a master last noted in its journal
        self.state = PopState()
        self._by_queue: dict[QueueKey, dict[int, int]] = {}  # offset -> ck id, ascending offsets, per queue
        self._due: list[tuple[int, int]] = []  # (deadline, ck id) heap; entries of acked or changed ones linger
        self._parked = 0  # pops waiting for a message
        self._wakeup = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.state = self.journal.load()
        self._reindex()
        self.ctx.store.add_group_dispatch_listener(self._dispatched)

    def _reindex(self) -> None:
        self._by_queue = {}
        for ck, record in self.state.inflight.items():
            self._hold((record.group, record.topic, record.queue_id), record.offset, ck)
        self._rebuild_due()

    def close(self) -> None:
        self.journal.close()

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def serving(self) -> bool:
        """Whether this broker pops, acks and revives: a master (a replica's store refuses writes), its
        state indexed once more after following the revive log."""
        if self.ctx.store.slave_mode:
            return False
        if self._followed:
            self.promote()
        return True

    def _record(self, *entries: dict[str, Any]) -> None:
        self.journal.append(*entries)
        if self.log is not None:
            self.log.queue(entries)

    async def durable(self) -> None:
        """Until what was recorded so far is on disk (the journal's fsync under SYNC_FLUSH) and, in
        controller mode, in the revive log as durable as a send (OffsetStoreError when it is not)."""
        await self.journal.synced()
        if self.log is not None and self.serving():
            end = await self.log.shipped()
            if end is not None:
                self.state.log_offset = max(self.state.log_offset, end)

    # -- replication -----------------------------------------------------------------------
    def follow(self, reads: int | None = 8) -> int:
        """A replica: apply the revive log's new records (up to ``reads`` reads; None: to its end) to
        the state and the journal; returns the entries applied. After the CommitLog was cut (a
        divergent tail dropped) the state is rebuilt from the log's first record."""
        log = self.log
        if log is None:
            return 0
        if self.ctx.store.truncations != self._truncations or log.end() < self.state.log_offset:
            self._truncations = self.ctx.store.truncations
            logger.warning("pop: the revive log was cut; the POP state is rebuilt from %s", log.topic)
            self.state = PopState(log_offset=log.start())
            self.journal.replace(self.state)
            self._followed = True
        applied = 0
        while reads is None or reads > 0:
            offset = max(self.state.log_offset, log.start())
            entries, next_offset = log.read(offset)
            if next_offset <= self.state.log_offset:
                break
            applied_now = []
            for entry in entries:
                try:
                    self.state.apply(entry)
                except (ValueError, KeyError, TypeError) as exc:
                    logger.warning("pop: revive log entry %.200r unreadable (%s), skipped", entry, exc)
                else:
                    applied_now.append(entry)
            self.state.log_offset = next_offset
            self.journal.append(*applied_now, {"k": "log", "o": next_offset})
            applied += len(applied_now)
            self._followed = True
            reads = None if reads is None else reads - 1
        self.journal.compact_if_grown(self.state)
        return applied

    def promote(self) -> None:
        """This replica became master: apply the rest of the revive log, then serve its state (the
        revive loop redelivers what its predecessor had in flight)."""
        applied = self.follow(reads=None)
        self._reindex()
        self._followed = False
        logger.info("pop: promoted with %d messages in flight (%d entries applied)", len(self.state.inflight), applied)

    def demote(self) -> None:
        """This master became a replica: what it did not ship is its successor's to decide."""
        if self.log is not None:
            self.log.drop_pending()

    async def tick(self) -> int:
        """The periodic duty: a master revives the expired (and notes in its journal how far the revive
        log holds its state, where a replay at start begins); a replica follows the revive log."""
        if not self.serving():
            self.follow()
            return 0
        if self.log is not None and self.state.log_offset != self._noted:
            self._noted = self.state.log_offset
            self.journal.append({"k": "log", "o": self._noted})
        return await self.revive()

    def _dispatched(self, keys: object, ends: object) -> None:
        loop = self._loop
        if self._parked and loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._wakeup.set)

    def _hold(self, key: QueueKey, offset: int, ck: int) -> None:
        pending = self._by_queue.setdefault(key, {})
        if pending and offset < next(reversed(pending)):  # a FIFO message popped again: keep offsets ascending
            pending[offset] = ck
            self._by_queue[key] = dict(sorted(pending.items()))
        else:
            pending[offset] = ck

    def _rebuild_due(self) -> None:
        self._due = [(r.deadline_ms, ck) for ck, r in self.state.inflight.items()]
        heapq.heapify(self._due)

    # -- pop -------------------------------------------------------------------------------
    async def pop_waiting(
        self,
        group: str,
        topic: str,
        max_nums: int,
        invisible_ms: int,
        wait_ms: int,
        *,
        fifo: bool = False,
        tags: Collection[str] | None = None,
        queue_id: int | None = None,
    ) -> list[Popped]:
        """``pop``, parked up to ``wait_ms`` until something arrives (long polling); durable when returned."""
        deadline = time.monotonic() + wait_ms / 1000
        self._parked += 1
        try:
            while True:
                self._wakeup.clear()
                popped = self.pop(group, topic, max_nums, invisible_ms, fifo=fifo, tags=tags, queue_id=queue_id)
                left = deadline - time.monotonic()
                if popped or left <= 0:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), min(left, 1.0))
        finally:
            self._parked -= 1
        await self.durable()
        return popped

    def pop(
        self,
        group: str,
        topic: str,
        max_nums: int,
        invisible_ms: int,
        *,
        fifo: bool = False,
        tags: Collection[str] | None = None,
        queue_id: int | None = None,
    ) -> list[Popped]:
        """Up to ``max_nums`` messages of ``topic`` (and the group's retry topic), invisible for ``invisible_ms``."""
        if not self.serving():
            return []  # a replica's state is its master's: pop from the master
        max_nums = max(1, min(max_nums, MAX_POP_NUMS))
        invisible_ms = max(MIN_INVISIBLE_MS, min(invisible_ms, MAX_INVISIBLE_MS))
        config = self.ctx.topics.get(topic)
        queues = range(config.read_queue_nums) if config is not None else range(0)
        if queue_id is not None:
            queues = range(queue_id, queue_id + 1) if queue_id in queues else range(0)
        sources = [(topic, q) for q in queues]
        retry = retry_topic(group)
        if self.ctx.topics.get(retry) is not None and queue_id is None:
            sources += [(retry, q) for q in self.ctx.store.queue_ids().get(retry, [])]
        popped: list[Popped] = []
        now = self._now_ms()
        start = now % max(1, len(sources))
        for source_topic, q in sources[start:] + sources[:start]:
            if len(popped) >= max_nums:
                break
            wanted = max_nums - len(popped)
            popped += self._pop_queue(group, source_topic, topic, q, wanted, now, invisible_ms, fifo, tags)
        return popped

    def _pop_queue(
        self,
        group: str,
        stored_topic: str,
        topic: str,
        queue_id: int,
        max_nums: int,
        now: int,
        invisible_ms: int,
        fifo: bool,
        tags: Collection[str] | None,
    ) -> list[Popped]:
        key = (group, stored_topic, queue_id)
        if fifo and self._by_queue.get(key):
            return []  # the queue's order: nothing more until its popped message is acked
        offset = self._pop_offset(key)
        result = self.ctx.store.get_messages(group, stored_topic, queue_id, offset, max_nums)
        if result.status is not GetMessageStatus.FOUND:
            if result.next_begin_offset > offset and result.status is not GetMessageStatus.OFFSET_OVERFLOW_ONE:
                self._advance(key, result.next_begin_offset)
            return []
        messages = list(_with_records(result.buffers))
        chosen = [(m, raw) for m, raw in messages if tags_match(m, tags)]
        next_offset = messages[-1][0].queue_offset + 1 if messages else result.next_begin_offset
        first = self.state.next_id
        deadline = now + invisible_ms
        entry = {"k": "pop", "id": first, "g": group, "t": stored_topic, "q": queue_id}
        entry |= {"o": [m.queue_offset for m, _ in chosen], "d": deadline, "f": fifo}
        off = {"k": "off", "g": group, "t": stored_topic, "q": queue_id, "o": next_offset}
        self._record(*([entry] if chosen else []), off)
        self.state.apply(entry) if chosen else None
        self.state.apply(off)
        retry = stored_topic != topic
        popped = []
        for i, (message, raw) in enumerate(chosen):
            self._hold(key, message.queue_offset, first + i)
            heapq.heappush(self._due, (deadline, first + i))
            handle = ReceiptHandle(
                first + i, now, invisible_ms, self.ctx.config.broker_name, queue_id, message.queue_offset, retry
            )
            popped.append(Popped(message, handle, topic, raw))
        self._commit(key)
        return popped

    def _pop_offset(self, key: QueueKey) -> int:
        offset = self.state.pop_offsets.get(key)
        if offset is not None:
            return offset
        group, topic, queue_id = key
        committed = self.ctx.offsets.query(group, topic, queue_id)
        return committed if committed >= 0 else self.ctx.store.min_offset_in_queue(topic, queue_id)

    def _advance(self, key: QueueKey, offset: int) -> None:
        entry = {"k": "off", "g": key[0], "t": key[1], "q": key[2], "o": offset}
        self._record(entry)
        self.state.apply(entry)
        self._commit(key)

    def _commit(self, key: QueueKey) -> None:
        """The group's consumer offset: the first message of the queue still invisible, else the pop offset."""
        pending = self._by_queue.get(key)
        offset = next(iter(pending)) if pending else self.state.pop_offsets.get(key)
        if offset is not None:
            self.ctx.offsets.commit(key[0], key[1], key[2], offset)

    # -- ack and change invisible time -----------------------------------------------------
    def _inflight(self, group: str, topic: str, handle: ReceiptHandle) -> tuple[int, Inflight]:
        """The live checkpoint of a handle: found by (group, topic or its retry topic, queue, offset),
        and only until its deadline, the handle's (an expired, revived or re-popped message is not)."""
        if not self.serving():
            raise InvalidReceiptHandleError(
                f"broker {self.ctx.config.broker_name} is a replica: acks and invisible-time changes go to its master"
            )
        stored = retry_topic(group) if handle.retry else topic
        ck = self._by_queue.get((group, stored, handle.queue_id), {}).get(handle.offset)
        record = self.state.inflight.get(ck) if ck is not None else None
        if ck is not None and record is not None and record.deadline_ms == handle.deadline_ms > self._now_ms():
            return ck, record
        raise InvalidReceiptHandleError(
            f"receipt handle {handle.encode()!r} names no message of {topic!r} invisible to group {group!r}"
            " (acked, expired or unknown)"
        )

    def ack(self, group: str, topic: str, handle_text: str) -> None:
        """Acknowledge one popped message; InvalidReceiptHandleError when its handle is not live."""
        ck, record = self._inflight(group, topic, ReceiptHandle.decode(handle_text))
        self._record({"k": "ack", "id": ck})
        self._drop(ck, record)

    def _drop(self, ck: int, record: Inflight) -> None:
        self.state.inflight.pop(ck, None)
        key = (record.group, record.topic, record.queue_id)
        pending = self._by_queue.get(key, {})
        if pending.get(record.offset) == ck:
            del pending[record.offset]
        if not pending:
            self._by_queue.pop(key, None)
        if record.fifo:
            self.state.fifo_attempts.pop((key, record.offset), None)
        self._commit(key)

    def change_invisible(self, group: str, topic: str, handle_text: str, invisible_ms: int) -> ReceiptHandle:
        """Make a popped message invisible for ``invisible_ms`` from now; the new handle replaces the old."""
        handle = ReceiptHandle.decode(handle_text)
        ck, record = self._inflight(group, topic, handle)
        invisible_ms = max(0, min(invisible_ms, MAX_INVISIBLE_MS))
        now = self._now_ms()
        entry = {"k": "chg", "id": ck, "d": now + invisible_ms}
        self._record(entry)
        self.state.apply(entry)
        heapq.heappush(self._due, (now + invisible_ms, ck))
        broker = handle.broker_name
        return ReceiptHandle(handle.ck_id, now, invisible_ms, broker, record.queue_id, record.offset, handle.retry)

    def fifo_attempt(self, key: QueueKey, offset: int) -> int:
        """The delivery attempt of a FIFO message redelivered in place (1 the first time)."""
        return self.state.fifo_attempts.get((key, offset), 0) + 1

    # -- revive ----------------------------------------------------------------------------
    async def revive(self) -> int:
        """Move every expired message on (retry topic, DLQ, or back in place for FIFO); returns how many."""
        now = self._now_ms()
        due: dict[int, Inflight] = {}
        while self._due and self._due[0][0] <= now:
            deadline, ck = heapq.heappop(self._due)
            record = self.state.inflight.get(ck)
            if record is not None and record.deadline_ms == deadline:
                due[ck] = record
        # a queue's messages in offset order, so a FIFO queue's earlier message is rewound before a later one
        expired = sorted(due.items(), key=lambda item: (item[1].group, item[1].topic, item[1].queue_id, item[1].offset))
        rewound: set[QueueKey] = set()
        moved = 0
        for ck, record in expired:
            if not await (self._fifo_expired(ck, record, rewound) if record.fifo else self._requeue(ck, record)):
                heapq.heappush(self._due, (record.deadline_ms, ck))  # tried again next time
                continue
            moved += 1
        if moved:
            self._wakeup.set()
        if len(self._due) > 2 * len(self.state.inflight) + 1024:
            self._rebuild_due()
        self.journal.compact_if_grown(self.state)
        await self.durable()
        return moved

    async def _fifo_expired(self, ck: int, record: Inflight, rewound: set[QueueKey]) -> bool:
        """An expired FIFO message: to the DLQ after its last attempt (unless an earlier message of its
        queue was just rewound, which it must follow), else back in place."""
        key = (record.group, record.topic, record.queue_id)
        attempts = self.state.fifo_attempts.get((key, record.offset), 0) + 1
        if key not in rewound and attempts > self._max_times(record.group):
            return await self._requeue(ck, record, to_dlq=True)
        rewound.add(key)
        self._rewind(ck, record, attempts)
        return True

    def _max_times(self, group_name: str) -> int:
        group = self.ctx.groups.find_or_create(group_name)
        return group.retry_max_times if group is not None else 16

    def _rewind(self, ck: int, record: Inflight, attempts: int) -> None:
        key = (record.group, record.topic, record.queue_id)
        offset = min(record.offset, self.state.pop_offsets.get(key, record.offset))
        tried = {"k": "try", "g": key[0], "t": key[1], "q": key[2], "o": record.offset, "n": attempts}
        self._record({"k": "ack", "id": ck}, {"k": "off", "g": key[0], "t": key[1], "q": key[2], "o": offset}, tried)
        self.state.pop_offsets[key] = offset
        self._drop(ck, record)
        self.state.apply(tried)

    def _read(self, record: Inflight) -> StoredMessage | None:
        result = self.ctx.store.get_messages(record.group, record.topic, record.queue_id, record.offset, 1)
        found = result.status is GetMessageStatus.FOUND
        messages = [m for buf in result.buffers for m in iter_records(buf)] if found else []
        return messages[0] if messages and messages[0].queue_offset == record.offset else None

    def inflight_message(self, group: str, topic: str, handle: ReceiptHandle) -> StoredMessage:
        """The stored message a live handle names (InvalidReceiptHandleError when none)."""
        message = self._read(self._inflight(group, topic, handle)[1])
        if message is None:
            raise InvalidReceiptHandleError(f"the message of receipt handle {handle.encode()!r} is no longer stored")
        return message

    async def _requeue(self, ck: int, record: Inflight, to_dlq: bool = False) -> bool:
        message = self._read(record)
        if message is None:
            logger.warning("pop revive: %s/%d offset %d is gone; dropped", record.topic, record.queue_id, record.offset)
        else:
            to_dlq = to_dlq or message.reconsume_times >= self._max_times(record.group)
            if not await self.resend(message, record.group, to_dlq=to_dlq):
                return False
        self._record({"k": "ack", "id": ck})
        self._drop(ck, record)
        return True

    async def resend(self, message: StoredMessage, group: str, *, to_dlq: bool) -> bool:
        """Store a copy of ``message`` in the group's retry topic (reconsume times + 1) or DLQ."""
        props = message.properties
        props.setdefault(RETRY_TOPIC, message.topic)
        props.setdefault(ORIGIN_MESSAGE_ID, message.offset_msg_id)
        props.pop(DELAY_TIME_LEVEL, None)
        topic = dlq_topic(group) if to_dlq else retry_topic(group)
        batch = message_copy(message, topic, props, message.reconsume_times + (0 if to_dlq else 1))
        result = await store_copy(self.ctx, topic, batch)
        if result.status is not PutMessageStatus.PUT_OK:
            logger.warning("pop: %s of a message of group %s failed: %s", topic, group, result.status.value)
            return False
        return True
