"""PopService: pop with an invisible time, ack, change the invisible time, revive the expired.

RocketMQ 5's PopMessageProcessor / AckMessageProcessor / ChangeInvisibleTimeProcessor /
PopReviveService over one journal (``journal.py``) instead of the CK/ACK system topics. A pop
reads from the group's pop offset of each queue (the topic's and the group's retry topic),
records a checkpoint per message and advances the offset; the group's committed offset (what
``consumerProgress`` shows, shared with 4.x consumers) is the smallest offset still invisible.
A message whose invisible time passes unacked goes to ``%RETRY%group`` with its reconsume
times + 1, or to ``%DLQ%group`` after ``retryMaxTimes``. FIFO groups lock per message group (the message's
``__SHARDINGKEY``; one without it is its queue's): while a message of a message group is in flight, the
group's later messages wait (journaled) and other message groups of the queue are delivered; an expired
message goes back to the head of its message group with its attempt count journaled, and to
``%DLQ%group`` once it has expired ``retryMaxTimes + 1`` times.

Each operation costs O(log n) in the messages in flight (and a FIFO queue's O(m) in its message groups
waiting): a handle names its checkpoint, a queue's in-flight messages are kept by offset in ascending
order, and revive takes the expired from a heap by deadline. The journal's fsync (SYNC_FLUSH) is awaited
once per request (``durable``), off the loop.

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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from sparkmq.broker.context import BrokerContext
from sparkmq.broker.ha.reads import in_memory_bytes
from sparkmq.broker.pop.attempts import Attempts
from sparkmq.broker.pop.handle import ReceiptHandle
from sparkmq.broker.pop.journal import Inflight, PopJournal, PopState, QueueKey
from sparkmq.broker.pop.revive_log import ReviveLog
from sparkmq.broker.pop.select import PopRequest, message_group_of
from sparkmq.broker.requeue import message_copy, store_copy
from sparkmq.errors import InvalidReceiptHandleError, OffsetStoreError
from sparkmq.message.names import dlq_topic, is_retry_topic, retry_topic
from sparkmq.message.properties import DELAY_TIME_LEVEL, ORIGIN_MESSAGE_ID, RETRY_TOPIC
from sparkmq.message.record import StoredMessage, iter_records
from sparkmq.store import PutMessageStatus
from sparkmq.store.status import GetMessageStatus

logger = logging.getLogger(__name__)
MAX_POP_NUMS = 32  # PopMessageRequestHeader maxMsgNums is at most 32 in RocketMQ 5
MIN_INVISIBLE_MS = 1_000
MAX_INVISIBLE_MS = 12 * 3600 * 1000  # the proxy's maxInvisibleTimeMills: 12 h
MAX_FIFO_WINDOW = 10_000  # a FIFO queue is read at most this far past its first message not yet consumed
FIFO_READ = 64  # messages a FIFO pop reads at a time
FIFO_WAIT_BYTES = 256 << 10  # a FIFO pop sets at most about this much of waiting messages in its journal line


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
        if log is not None:  # whose record makes a change durable, as the journal's fsync does without it
            journal.make_durable = self._shipped
        self._truncations = ctx.store.truncations  # a change: the applied revive log may have lost its tail
        self._followed = False  # the state changed by follow() since it was last indexed
        self._noted = 0  # the revive log offset a master last noted in its journal
        self.state = PopState()
        self._by_queue: dict[QueueKey, dict[int, int]] = {}  # offset -> ck id, ascending offsets, per queue
        self._busy: dict[QueueKey, dict[str, int]] = {}  # a FIFO queue's message groups in flight -> ck id
        self.attempts = Attempts()
        self._due: list[tuple[int, int]] = []  # (deadline, ck id) heap; entries of acked or changed ones linger
        self._origins: dict[QueueKey, int] = {}  # a queue's committed offset before the group's first pop of it
        self._parked = 0  # pops waiting for a message
        self._wakeup = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.state = self.journal.load()
        self._reindex()
        self.journal.on_lost = self._roll_back
        self.ctx.store.add_group_dispatch_listener(self._dispatched)

    def _reindex(self) -> None:
        self._by_queue, self._busy = {}, {}
        for ck, record in self.state.inflight.items():
            self._hold((record.group, record.topic, record.queue_id), record.offset, ck)
            if record.fifo:
                self._busy.setdefault((record.group, record.topic, record.queue_id), {})[record.message_group] = ck
        self._rebuild_due()

    def _roll_back(self, durable: PopState) -> None:
        """The journal lost the changes since they were last durable: back to the state on disk, the groups'
        offsets with it, and the revive log drops them. Checkpoint ids stay increasing, so a lost pop's handles
        never name a later message."""
        if self.log is not None:
            self.log.drop_pending()
        touched = set(self._by_queue) | set(self.state.pop_offsets)
        next_id = self.state.next_id
        self.state = durable.copy()
        self._reindex()
        self.state.next_id = max(self.state.next_id, next_id)
        for key in touched | set(self._by_queue):
            origin = self._origins.get(key)
            if key not in self.state.pop_offsets and origin is not None:
                self.ctx.offsets.commit(key[0], key[1], key[2], origin)
            self._commit(key)

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
        """Until what was recorded so far is durable: on disk (the journal's fsync under SYNC_FLUSH) or, in
        controller mode, in the revive log as durable as a send. OffsetStoreError when it is not.

        In controller mode the revive log's record is the journal's fsync: when the store refuses it,
        the lines not yet in the log are lost as a failed fsync loses them (the state goes back to the
        journal's durable one, ``_roll_back``) and the callers retry; under ASYNC_FLUSH nothing goes
        back and the next record carries the entries.
        """
        await self.journal.synced()

    async def _shipped(self) -> None:
        """The journal's lines made durable in controller mode: their entries stored in the revive log."""
        assert self.log is not None
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
        self.journal.settle()  # what came from the revive log is as durable as it
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
    async def pop_waiting(self, ask: PopRequest, wait_ms: int) -> list[Popped]:
        """``pop``, parked up to ``wait_ms`` until something arrives (long polling); durable when returned."""
        deadline = time.monotonic() + wait_ms / 1000
        self._parked += 1
        try:
            while True:
                self._wakeup.clear()
                popped = self.pop(ask)
                left = deadline - time.monotonic()
                if popped or left <= 0:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), min(left, 1.0))
        finally:
            self._parked -= 1
        await self.durable()
        return popped

    def pop(self, ask: PopRequest) -> list[Popped]:
        """Up to ``max_nums`` messages of the topic (and the group's retry topic), invisible for ``invisible_ms``;
        a retried attempt gets its earlier answer's messages still invisible."""
        if not self.serving():
            return []  # a replica's state is its master's: pop from the master
        now = self._now_ms()
        if ask.attempt_id:
            again = self._answered_again(ask, now)
            if again:
                return again
        max_nums = max(1, min(ask.max_nums, MAX_POP_NUMS))
        invisible_ms = max(MIN_INVISIBLE_MS, min(ask.invisible_ms, MAX_INVISIBLE_MS))
        group, topic, queue_id = ask.group, ask.topic, ask.queue_id
        config = self.ctx.topics.get(topic)
        queues = range(config.read_queue_nums) if config is not None else range(0)
        if queue_id is not None:
            queues = range(queue_id, queue_id + 1) if queue_id in queues else range(0)
        sources = [(topic, q) for q in queues]
        retry = retry_topic(group)
        if self.ctx.topics.get(retry) is not None and queue_id is None:
            sources += [(retry, q) for q in self.ctx.store.queue_ids().get(retry, [])]
        popped: list[Popped] = []
        start = now % max(1, len(sources))
        for source_topic, q in sources[start:] + sources[:start]:
            if len(popped) >= max_nums:
                break
            wanted = max_nums - len(popped)
            popped += self._pop_queue(ask, (group, source_topic, q), wanted, now, invisible_ms)
        if ask.attempt_id and popped:
            ck_ids = tuple(p.handle.ck_id for p in popped)
            self.attempts.remember(group, topic, ask.attempt_id, ck_ids, now + invisible_ms)
        return popped

    def _answered_again(self, ask: PopRequest, now: int) -> list[Popped]:
        """The messages of this attempt's earlier answer that are still invisible, with their current handles."""
        attempt = self.attempts.answered(ask.group, ask.topic, ask.attempt_id, now)
        again = []
        for ck in attempt.ck_ids if attempt is not None else ():
            record = self.state.inflight.get(ck)
            if record is None or record.deadline_ms <= now:
                continue
            found = self._read_raw((record.group, record.topic, record.queue_id), record.offset)
            if found is None:
                continue
            invisible = max(1, record.deadline_ms - now)
            retry = record.topic != ask.topic
            broker = self.ctx.config.broker_name
            handle = ReceiptHandle(ck, now, invisible, broker, record.queue_id, record.offset, retry)
            again.append(Popped(found[0], handle, ask.topic, found[1]))
        return again

    def _pop_queue(self, ask: PopRequest, key: QueueKey, max_nums: int, now: int, invisible_ms: int) -> list[Popped]:
        if ask.fifo:
            return self._pop_fifo(ask, key, max_nums, now, invisible_ms)
        offset = self._pop_offset(key, ask.init_max)
        result = self.ctx.store.get_messages(key[0], key[1], key[2], offset, max_nums)
        if result.status is not GetMessageStatus.FOUND:
            if result.next_begin_offset > offset and result.status is not GetMessageStatus.OFFSET_OVERFLOW_ONE:
                self._advance(key, result.next_begin_offset)
            return []
        messages = list(_with_records(result.buffers))
        chosen = [(m, raw) for m, raw in messages if ask.accepts(m)]
        next_offset = messages[-1][0].queue_offset + 1 if messages else result.next_begin_offset
        off = {"k": "off", "g": key[0], "t": key[1], "q": key[2], "o": next_offset}
        return self._deliver(ask, key, chosen, off, now, invisible_ms)

    def _deliver(
        self,
        ask: PopRequest,
        key: QueueKey,
        chosen: list[tuple[StoredMessage, bytes]],
        off: dict[str, Any],
        now: int,
        invisible_ms: int,
    ) -> list[Popped]:
        """Record the checkpoints of ``chosen`` and the queue's new pop offset ``off``; their handles."""
        first = self.state.next_id
        deadline = now + invisible_ms
        entry = {"k": "pop", "id": first, "g": key[0], "t": key[1], "q": key[2]}
        entry |= {"o": [m.queue_offset for m, _ in chosen], "d": deadline, "f": ask.fifo}
        if ask.fifo:
            entry["m"] = [message_group_of(m) for m, _ in chosen]
        self._record(*([entry] if chosen else []), off)
        self.state.apply(entry) if chosen else None
        self.state.apply(off)
        retry = key[1] != ask.topic
        popped = []
        broker = self.ctx.config.broker_name
        for i, (message, raw) in enumerate(chosen):
            self._hold(key, message.queue_offset, first + i)
            if ask.fifo:
                self._busy.setdefault(key, {})[message_group_of(message)] = first + i
            heapq.heappush(self._due, (deadline, first + i))
            handle = ReceiptHandle(first + i, now, invisible_ms, broker, key[2], message.queue_offset, retry)
            popped.append(Popped(message, handle, ask.topic, raw))
        self._commit(key)
        return popped

    def _pop_fifo(self, ask: PopRequest, key: QueueKey, max_nums: int, now: int, invisible_ms: int) -> list[Popped]:
        """A FIFO queue: at most one message of each message group in flight. The first waiting message of a message
        group with none in flight goes first, then new messages are read; one whose message group is locked (or
        has earlier ones waiting) waits, up to ``MAX_FIFO_WINDOW`` messages past the queue's first unacked one."""
        busy = self._busy.get(key, {})
        waiting = self.state.fifo_waiting.get(key, {})
        heads = sorted((offsets[0], g) for g, offsets in waiting.items() if g not in busy)[:max_nums]
        chosen: list[tuple[StoredMessage, bytes]] = []
        taken = set(busy)
        for offset, message_group in heads:
            found = self._read_raw(key, offset)
            if found is None:  # no longer stored: nothing to deliver
                self.state.unwait(key, message_group, offset)
                self.state.fifo_attempts.pop((key, offset), None)
                continue
            chosen.append(found)
            taken.add(message_group)
        start = self._pop_offset(key, ask.init_max)
        floor = self._committed(key)
        read, skipped, offset = self._scan_fifo(ask, key, start, max_nums - len(chosen), taken, floor)
        chosen += read
        if not chosen and not skipped and offset == start:
            return []
        off = {"k": "off", "g": key[0], "t": key[1], "q": key[2], "o": offset} | ({"w": skipped} if skipped else {})
        chosen.sort(key=lambda found: found[0].queue_offset)
        return self._deliver(ask, key, chosen, off, now, invisible_ms)

    def _scan_fifo(
        self, ask: PopRequest, key: QueueKey, offset: int, room: int, taken: set[str], floor: int | None
    ) -> tuple[list[tuple[StoredMessage, bytes]], dict[str, list[int]], int]:
        """A FIFO queue's new messages from ``offset``: up to ``room`` of message groups not ``taken`` (nor waiting),
        the others to wait (a journal line's worth), and the offset read up to."""
        waiting = self.state.fifo_waiting.get(key, {})
        chosen: list[tuple[StoredMessage, bytes]] = []
        skipped: dict[str, list[int]] = {}
        budget = FIFO_WAIT_BYTES
        while len(chosen) < room and budget > 0 and offset - (offset if floor is None else floor) < MAX_FIFO_WINDOW:
            result = self.ctx.store.get_messages(key[0], key[1], key[2], offset, FIFO_READ)
            if result.status is not GetMessageStatus.FOUND:
                if result.next_begin_offset > offset and result.status is not GetMessageStatus.OFFSET_OVERFLOW_ONE:
                    offset = result.next_begin_offset
                    continue
                break
            for message, raw in _with_records(result.buffers):
                if len(chosen) >= room or budget <= 0:
                    break
                offset = message.queue_offset + 1
                if not ask.accepts(message):
                    continue
                message_group = message_group_of(message)
                if message_group in taken or message_group in waiting or message_group in skipped:
                    budget -= 12 if message_group in skipped else 16 + len(message_group)
                    skipped.setdefault(message_group, []).append(message.queue_offset)
                else:
                    chosen.append((message, raw))
                    taken.add(message_group)
            else:
                offset = max(offset, result.next_begin_offset)
        return chosen, skipped, offset

    def _pop_offset(self, key: QueueKey, init_max: bool) -> int:
        offset = self.state.pop_offsets.get(key)
        if offset is not None:
            return offset
        group, topic, queue_id = key
        committed = self.ctx.offsets.query(group, topic, queue_id)
        offset = committed if committed >= 0 else self._init_offset(topic, queue_id, init_max)
        self._origins[key] = offset
        return offset

    def _init_offset(self, topic: str, queue_id: int, init_max: bool) -> int:
        """Where a group without an offset starts (PopMessageProcessor's initMode): MIN at the queue's first
        message; MAX at its last one, or at the first when the queue still has it in the in-memory window
        (``initPopOffsetByCheckMsgInMem``). A retry topic always from its first."""
        store = self.ctx.store
        first = store.min_offset_in_queue(topic, queue_id)
        if not init_max or is_retry_topic(topic):
            return first
        if self.ctx.config.init_pop_offset_by_check_msg_in_mem and first <= 0:
            result = store.get_messages("", topic, queue_id, 0, 1)
            if result.status is GetMessageStatus.FOUND and len(result.physical_offsets):
                behind = store.commitlog.max_offset - int(result.physical_offsets[0])
                if behind <= in_memory_bytes(self.ctx.config):
                    return 0
        return max(0, store.max_offset_in_queue(topic, queue_id) - 1)

    def _advance(self, key: QueueKey, offset: int) -> None:
        entry = {"k": "off", "g": key[0], "t": key[1], "q": key[2], "o": offset}
        self._record(entry)
        self.state.apply(entry)
        self._commit(key)

    def _committed(self, key: QueueKey) -> int | None:
        """The first message of the queue still invisible or waiting (FIFO), else the pop offset."""
        pending = self._by_queue.get(key)
        offset = next(iter(pending)) if pending else self.state.pop_offsets.get(key)
        waiting = self.state.fifo_waiting.get(key)
        if waiting:
            first = min(offsets[0] for offsets in waiting.values())
            offset = first if offset is None else min(offset, first)
        return offset

    def _commit(self, key: QueueKey) -> None:
        """The group's consumer offset: where its messages not yet consumed start."""
        offset = self._committed(key)
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
        """The message is consumed (acked, or moved to the retry topic or the DLQ)."""
        self.state.inflight.pop(ck, None)
        if record.fifo:
            self.state.fifo_attempts.pop(((record.group, record.topic, record.queue_id), record.offset), None)
        self._release(ck, record)

    def _release(self, ck: int, record: Inflight) -> None:
        """The message is no longer in flight: out of its queue's index, its FIFO message group unlocked."""
        key = (record.group, record.topic, record.queue_id)
        pending = self._by_queue.get(key, {})
        if pending.get(record.offset) == ck:
            del pending[record.offset]
        if not pending:
            self._by_queue.pop(key, None)
        if record.fifo:
            self._unlock(key, record.message_group, ck)
        self._commit(key)

    def _unlock(self, key: QueueKey, message_group: str, ck: int) -> None:
        """The FIFO message ``ck`` no longer in flight: its message group's next one may go (parked pops wake)."""
        busy = self._busy.get(key, {})
        if busy.get(message_group) == ck:
            del busy[message_group]
            if not busy:
                del self._busy[key]
            if self._parked:
                self._wakeup.set()

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
        moved = done = 0
        expired = list(due.items())
        try:
            if expired:
                self.journal.check()  # no copy to the retry topic that the journal could not then record
            for ck, record in expired:
                revived = await (self._fifo_expired(ck, record) if record.fifo else self._requeue(ck, record))
                done += 1
                if not revived:
                    heapq.heappush(self._due, (record.deadline_ms, ck))  # tried again next time
                    continue
                moved += 1
        except OffsetStoreError:  # the journal refused: the rest are tried again next time
            for ck, record in expired[done:]:
                heapq.heappush(self._due, (record.deadline_ms, ck))
            raise
        if moved:
            self._wakeup.set()
        if len(self._due) > 2 * len(self.state.inflight) + 1024:
            self._rebuild_due()
        self.journal.compact_if_grown(self.state)
        await self.durable()
        return moved

    async def _fifo_expired(self, ck: int, record: Inflight) -> bool:
        """An expired FIFO message: to the DLQ after its last attempt, else back to the head of its message group."""
        key = (record.group, record.topic, record.queue_id)
        attempts = self.state.fifo_attempts.get((key, record.offset), 0) + 1
        if attempts > self._max_times(record.group):
            return await self._requeue(ck, record, to_dlq=True)
        back = {"k": "back", "id": ck, "n": attempts}
        self._record(back)
        self.state.apply(back)
        self._release(ck, record)
        return True

    def _max_times(self, group_name: str) -> int:
        group = self.ctx.groups.find_or_create(group_name)
        return group.retry_max_times if group is not None else 16

    def _read_raw(self, key: QueueKey, offset: int) -> tuple[StoredMessage, bytes] | None:
        """The stored message at ``offset`` of a queue and its record, None when it is no longer stored."""
        result = self.ctx.store.get_messages(key[0], key[1], key[2], offset, 1)
        found = list(_with_records(result.buffers)) if result.status is GetMessageStatus.FOUND else []
        return found[0] if found and found[0][0].queue_offset == offset else None

    def _read(self, record: Inflight) -> StoredMessage | None:
        found = self._read_raw((record.group, record.topic, record.queue_id), record.offset)
        return found[0] if found is not None else None

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
