"""The POP state and its journal: checkpoints, acks, changed invisible times and pop offsets.

One JSON line per change, written before the change is answered and, when the store flushes
synchronously, fsynced too (``synced``: one fsync off the event loop serves every change written
before it, so an RPC's or a batch's lines share one), so a popped-but-unacked message is
redelivered after a kill -9 and an acked one is not. ``load`` replays the lines; a torn last line
(a crash mid-write) is dropped. ``compact`` rewrites the live state (tmp, fsync, rename) once the file has grown.

A failed fsync loses every line written since the last good one: the callers waiting on them get
:class:`OffsetStoreError` (retriable), ``on_lost`` hands the owner the state on disk (``durable``) to go
back to, and the file is rewritten from that state (a fresh file: the failed one's pages are not
trusted again); until a rewrite succeeds, appends are refused. Every fsync goes through
``sparkmq.store.disk``, the seam a test injects a disk fault through.

Lines: ``{"k": "pop", "id": first ckId, "g", "t", "q", "o": [offsets], "d": deadline, "f": fifo, "m": [message
groups] (FIFO)}``, ``{"k": "ack", "id"}``, ``{"k": "chg", "id", "d"}``, ``{"k": "off", "g", "t", "q", "o", "w": {message
group: [offsets]}}`` (the pop offset, and the FIFO messages read past while their message group was locked),
``{"k": "seq", "id": next ckId}``, ``{"k": "back", "id", "n"}`` (an expired FIFO message back to the head of its
message group, after ``n`` expired deliveries; an ack of it clears them), ``{"k": "try", "g", "t", "q", "o", "n"}``,
``{"k": "log", "o"}`` (how far the revive log is applied, ``revive_log.py``).
"""

from __future__ import annotations

import asyncio
import bisect
import json
import logging
import os
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkmq.errors import OffsetStoreError
from sparkmq.store import disk

logger = logging.getLogger(__name__)
COMPACT_ABOVE_BYTES = 4 << 20
MAX_LINE_BYTES = 4 << 20  # a pop line lists at most a batch's offsets and message groups (each < 32 KiB)

QueueKey = tuple[str, str, int]  # (group, topic, queue_id)
# makes every line written so far durable; OffsetStoreError when it cannot (its remark says why)
MakeDurable = Callable[[], Awaitable[None]]


@dataclass(slots=True)
class Inflight:
    """One popped message still invisible to its group."""

    group: str
    topic: str  # the stored topic: the message's own or the group's retry topic
    queue_id: int
    offset: int
    deadline_ms: int
    fifo: bool
    message_group: str = ""  # a FIFO message's (its ``__SHARDINGKEY``); "" when it names none


@dataclass
class PopState:
    """What the journal describes: in-flight checkpoints by id, and each queue's pop offset."""

    inflight: dict[int, Inflight] = field(default_factory=dict)
    pop_offsets: dict[QueueKey, int] = field(default_factory=dict)
    fifo_attempts: dict[tuple[QueueKey, int], int] = field(default_factory=dict)  # (queue, offset) -> expiries
    # a FIFO queue's messages read past while their message group had one in flight: message group -> offsets
    fifo_waiting: dict[QueueKey, dict[str, list[int]]] = field(default_factory=dict)
    next_id: int = 1
    log_offset: int = 0  # the revive log's queue offset up to which this state holds its records

    def apply(self, entry: dict[str, Any]) -> None:
        kind = entry["k"]
        if kind == "pop":
            first, key = int(entry["id"]), (entry["g"], entry["t"], int(entry["q"]))
            groups = entry.get("m") or [""] * len(entry["o"])
            for i, (offset, message_group) in enumerate(zip(entry["o"], groups, strict=True)):
                self.inflight[first + i] = Inflight(*key, int(offset), int(entry["d"]), bool(entry["f"]), message_group)
                if entry.get("m") is not None:
                    self.unwait(key, message_group, int(offset))
            self.next_id = max(self.next_id, first + len(entry["o"]))
        elif kind == "ack":
            record = self.inflight.pop(int(entry["id"]), None)
            if record is not None and record.fifo:
                self.fifo_attempts.pop(((record.group, record.topic, record.queue_id), record.offset), None)
        elif kind == "chg":
            record = self.inflight.get(int(entry["id"]))
            if record is not None:
                record.deadline_ms = int(entry["d"])
        elif kind == "seq":
            self.next_id = max(self.next_id, int(entry["id"]))
        elif kind == "off":
            key = (entry["g"], entry["t"], int(entry["q"]))
            self.pop_offsets[key] = int(entry["o"])
            for message_group, offsets in (entry.get("w") or {}).items():
                for offset in offsets:
                    self.wait(key, message_group, int(offset))
        elif kind == "back":
            record = self.inflight.pop(int(entry["id"]), None)
            if record is not None:
                key = (record.group, record.topic, record.queue_id)
                self.fifo_attempts[(key, record.offset)] = int(entry["n"])
                self.wait(key, record.message_group, record.offset)
        elif kind == "try":
            self.fifo_attempts[((entry["g"], entry["t"], int(entry["q"])), int(entry["o"]))] = int(entry["n"])
        elif kind == "log":
            self.log_offset = int(entry["o"])

    def copy(self) -> PopState:
        state = PopState()
        for entry in self.entries():
            state.apply(entry)
        return state

    def entries(self) -> list[dict[str, Any]]:
        """The state as journal lines (for compaction)."""
        lines: list[dict[str, Any]] = []
        for (g, t, q), o in self.pop_offsets.items():
            lines.append({"k": "off", "g": g, "t": t, "q": q, "o": o})
            for message_group, offsets in self.fifo_waiting.get((g, t, q), {}).items():  # a line each: bounded
                lines.append({"k": "off", "g": g, "t": t, "q": q, "o": o, "w": {message_group: offsets}})
        for ck, r in self.inflight.items():
            lines.append(
                {"k": "pop", "id": ck, "g": r.group, "t": r.topic, "q": r.queue_id, "o": [r.offset], "d": r.deadline_ms}
                | {"f": r.fifo}
                | ({"m": [r.message_group]} if r.fifo else {})
            )
        lines += [
            {"k": "try", "g": g, "t": t, "q": q, "o": o, "n": n} for ((g, t, q), o), n in self.fifo_attempts.items()
        ]
        lines.append({"k": "seq", "id": self.next_id})
        lines.append({"k": "log", "o": self.log_offset})
        return lines

    def wait(self, key: QueueKey, message_group: str, offset: int) -> None:
        """A FIFO message to deliver after the one of its message group in flight (offsets kept ascending)."""
        offsets = self.fifo_waiting.setdefault(key, {}).setdefault(message_group, [])
        if not offsets or offsets[-1] < offset:
            offsets.append(offset)
            return
        i = bisect.bisect_left(offsets, offset)
        if offsets[i] != offset:
            offsets.insert(i, offset)

    def unwait(self, key: QueueKey, message_group: str, offset: int) -> None:
        """A waiting FIFO message delivered (usually the head of its message group)."""
        waiting = self.fifo_waiting.get(key, {})
        offsets = waiting.get(message_group)
        if not offsets or offset not in offsets:
            return
        if offsets[0] == offset:
            del offsets[0]
        else:
            offsets.remove(offset)
        if not offsets:
            del waiting[message_group]
            if not waiting:
                del self.fifo_waiting[key]


class PopJournal:
    """Appends entries to ``path``; ``synced`` waits until they are durable by ``make_durable``: the file's
    fsync under ``sync`` (SYNC_FLUSH brokers), nothing without; an owner that keeps them durable elsewhere sets
    its own (the revive log's record). With ``sync``, a failure of it loses the lines (``_lose``)."""

    def __init__(self, path: Path, sync: bool) -> None:
        self.path = path
        self.sync = sync
        self.make_durable: MakeDurable | None = self._fsync if sync else None
        # the state of the lines on disk: with ``sync``, of those made durable; without, the owner's own (all written)
        self.durable = PopState()
        self.on_lost: Callable[[PopState], None] = lambda durable: None
        self._file: Any = None
        self._written = 0  # appends so far
        self._synced = 0  # appends made durable (by ``make_durable`` or the owner: ``settle``)
        self._unsynced: list[tuple[int, tuple[dict[str, Any], ...]]] = []  # (append number, its entries)
        self._lost = (0, 0)  # the appends (after, through] a failed write or make_durable dropped
        self._lost_reason = ""
        self._broken = False  # the file may hold lines of a failed write or fsync: rewritten before the next append
        self._syncing: asyncio.Future[None] | None = None
        self._fsyncs: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()  # an fsync off the loop against a rewrite closing the file

    def load(self) -> PopState:
        state = PopState()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            with open(self.path, "rb") as f:
                for number, line in enumerate(f, 1):
                    if len(line) > MAX_LINE_BYTES or not line.endswith(b"\n"):
                        logger.warning("%s: line %d torn or oversized, dropped", self.path, number)
                        break
                    try:
                        state.apply(json.loads(line))
                    except (ValueError, KeyError, TypeError) as exc:
                        logger.warning("%s: line %d unreadable (%s), dropped with what follows", self.path, number, exc)
                        break
        self._rewrite(state)
        self.durable = state.copy() if self.sync else state
        return state

    def append(self, *entries: dict[str, Any]) -> None:
        """Write ``entries`` to the file (the page cache); ``synced`` makes them durable. OffsetStoreError
        (nothing written) while the file cannot be written or rewritten."""
        data = b"".join(json.dumps(e, separators=(",", ":")).encode() + b"\n" for e in entries)
        self.check()
        try:
            self._file.write(data)
            self._file.flush()
        except OSError as exc:
            reason = f"cannot append to the POP journal {self.path}: {exc}"
            self._broken = True  # part of the line may be in the file
            if self.sync:
                self._lose(reason)
            raise OffsetStoreError(reason, retriable=True) from exc
        self._written += 1
        if self.sync:
            self._unsynced.append((self._written, entries))

    def check(self) -> None:
        """OffsetStoreError while the file, after a failure, still cannot be rewritten (an append would fail)."""
        if self._broken:
            self._rewrite(self.durable)

    async def synced(self) -> None:
        """Until every entry appended so far is durable. One ``make_durable`` runs at a time; the callers
        that appended before it started all return when it ends, or all raise OffsetStoreError when it
        failed (with ``sync``, their changes were rolled back)."""
        target = self._written
        while self.make_durable is not None:
            if self._lost[0] < target <= self._lost[1]:
                raise OffsetStoreError(self._lost_reason, retriable=True)
            if self._synced >= target:
                return
            if self._syncing is None:
                self._syncing = asyncio.ensure_future(self._make_durable(self.make_durable))
            await asyncio.shield(self._syncing)

    async def _make_durable(self, make_durable: MakeDurable) -> None:
        upto = self._written
        try:
            await make_durable()
        except OffsetStoreError as exc:
            if not self.sync:  # nothing to go back to: the owner's state is the written one
                raise
            self._lose(exc.remark)
            return
        finally:
            self._syncing = None
        self._settle(upto)

    async def _fsync(self) -> None:
        """The file's fsync, in a thread."""
        if self._fsyncs is None:
            self._fsyncs = ThreadPoolExecutor(1, thread_name_prefix="sparkmq-pop-journal")
        try:
            await asyncio.get_running_loop().run_in_executor(self._fsyncs, self._fsync_file)
        except OSError as exc:
            raise OffsetStoreError(f"cannot fsync the POP journal {self.path}: {exc}") from exc

    def settle(self) -> None:
        """Every append so far is durable (the owner made it so: a replica's lines are its revive log's);
        OffsetStoreError when it was lost meanwhile (``_lose``)."""
        if self._lost[0] < self._written <= self._lost[1]:
            raise OffsetStoreError(self._lost_reason, retriable=True)
        self._settle(self._written)

    def _settle(self, upto: int) -> None:
        done = 0
        for number, entries in self._unsynced:
            if number > upto:
                break
            for entry in entries:
                self.durable.apply(entry)
            done += 1
        del self._unsynced[:done]
        self._synced = max(self._synced, upto)

    def _fsync_file(self) -> None:
        with self._lock:
            if self._file is not None:
                disk.fsync(self._file.fileno())

    def _lose(self, reason: str) -> None:
        """Every line since the last durable one is lost: its callers fail, the owner goes back to ``durable``."""
        self._lost = (self._synced, self._written)
        self._lost_reason = f"{reason}; the request's changes were not kept, retry it"
        logger.error("%s", self._lost_reason)
        self._unsynced.clear()
        self._broken = True
        try:
            self._rewrite(self.durable)
        except OffsetStoreError as rewrite:
            logger.error("%s; appends are refused until it can be rewritten", rewrite.remark)
        self.on_lost(self.durable)

    def compact_if_grown(self, state: PopState) -> None:
        """Rewrite the file from the live ``state`` once it has grown: every change so far is then on disk."""
        if self._file is not None and self._file.tell() > COMPACT_ABOVE_BYTES:
            self.replace(state)

    def replace(self, state: PopState) -> None:
        """The file holds ``state`` alone from now on (rewritten, fsynced)."""
        self._rewrite(state)
        self._unsynced.clear()
        self.durable = state.copy() if self.sync else state

    def _rewrite(self, state: PopState) -> None:
        tmp = self.path.with_suffix(".tmp")
        try:
            with open(tmp, "wb") as f:
                for entry in state.entries():
                    f.write(json.dumps(entry, separators=(",", ":")).encode() + b"\n")
                f.flush()
                disk.fsync(f.fileno())
            os.replace(tmp, self.path)
            with self._lock:
                if self._file is not None:
                    self._file.close()
                self._file = open(self.path, "ab")  # noqa: SIM115 - held open for appends until close()
            self._broken = False
        except OSError as exc:
            raise OffsetStoreError(f"cannot rewrite the POP journal {self.path}: {exc}", retriable=True) from exc

    def close(self) -> None:
        if self._fsyncs is not None:
            self._fsyncs.shutdown(wait=True)
            self._fsyncs = None
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
