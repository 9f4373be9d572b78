"""Flush services: ASYNC (a background interval flush) and SYNC (group commit), and the
store's flushes with their fail-stop (:class:`StoreFlush`).

Group commit: each put asks for "flushed past offset X" and gets a future; one thread runs
an fsync covering every request queued so far and completes them all, so concurrent
writers share fsyncs (``CommitLog.GroupCommitService``), and holds a flush briefly for the
writers the previous one answered (:class:`GroupCommitService`).

A waiter may give up on its future (a timed-out SYNC send); completing such a future is not
an error, and nothing a future or a flush does can end the group-commit thread.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import TYPE_CHECKING

from sparkmq.errors import DiskError
from sparkmq.store.mapped_file import PAGE_BYTES
from sparkmq.store.status import PutMessageStatus, PutResult

if TYPE_CHECKING:
    from sparkmq.store.message_store import MessageStore

logger = logging.getLogger(__name__)

HOLD_MAX_S = 0.005  # the longest a flush waits for the writers expected back (GroupCommitService)
FLUSH_AVERAGE_WEIGHT = 0.2  # of each flush's duration in the moving average


class GroupCommitService:
    """Completes ``request(offset)`` futures once ``flush()`` has covered ``offset``.

    Requests that arrive while a flush runs all ride the next one. Before a flush the thread
    holds it for the writers the previous flush answered: a synchronous sender asks again as
    soon as it has its answer, so with two or more of them a flush started at once covers only
    those already waiting, and the others, arriving during it, need one more. The flush waits
    until as many requests came after those answers as the flush answered, or for at most the
    average flush time (what the flush it saves would cost; ``HOLD_MAX_S`` at most), whichever
    comes first; ext4's journal batches concurrent fsyncs the same way. A lone writer never
    waits: its next request is the one expected.
    """

    def __init__(self, flush: Callable[[], int], name: str = "sparkmq-group-commit") -> None:
        self._flush = flush
        self._pending: list[tuple[int, Future[int]]] = []
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._flushed = -1  # what the last flush returned
        self._arrivals = 0  # requests so far
        self._mark = 0  # arrivals when the last flush that synced answered its requests
        self._expected = 0  # requests answered since then: the writers expected back
        self._flush_s = 0.0  # moving average of a flush's duration

    def start(self) -> None:
        self._thread.start()

    def request(self, offset: int) -> Future[int]:
        """A future that resolves to the flushed offset once it is ≥ ``offset``."""
        future: Future[int] = Future()
        with self._cond:
            if self._stopped:
                future.set_exception(RuntimeError("group commit service is stopped"))
                return future
            self._pending.append((offset, future))
            self._arrivals += 1
            self._cond.notify()
        return future

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stopped:
                    self._cond.wait()
                if self._stopped and not self._pending:
                    return
                self._hold()
                batch, self._pending = self._pending, []
            try:
                self._complete(batch)
            except Exception:  # the thread outlives any one batch; the batch's waiters time out
                logger.exception("group commit failed to complete %d requests", len(batch))

    def _hold(self) -> None:
        """Under the condition: wait for the writers expected back (see the class), unless every
        pending request is flushed already."""
        flushed, deadline = self._flushed, 0.0
        if not any(offset > flushed for offset, _future in self._pending):
            return
        while not self._stopped and self._arrivals - self._mark < self._expected:
            now = time.monotonic()
            if not deadline:
                deadline = now + min(self._flush_s, HOLD_MAX_S)
            if now >= deadline:
                return
            self._cond.wait(deadline - now)

    def _complete(self, batch: list[tuple[int, Future[int]]]) -> None:
        syncs = any(offset > self._flushed for offset, _future in batch)
        started = time.monotonic()
        try:
            flushed = self._flush()
        except Exception as exc:  # every waiter must learn that its flush failed
            logger.error("group commit flush failed: %s", exc)
            for _offset, future in batch:
                _settle(future, exception=exc)
            return
        late = [(offset, future) for offset, future in batch if flushed < offset and not future.done()]
        answered = len(batch) - len(late)  # those whose waiters gave up included: they may ask again
        with self._cond:  # before the answers go out: a writer's next request comes after the mark
            self._flushed = flushed
            if syncs:
                self._flush_s += (time.monotonic() - started - self._flush_s) * FLUSH_AVERAGE_WEIGHT
                self._mark, self._expected = self._arrivals, answered
            else:  # covered by the last flush that synced: expected back as its answers are
                self._expected += answered
            if late:
                self._pending[:0] = late
        for offset, future in batch:
            if flushed >= offset and not future.done():  # else late, or its waiter gave up
                _settle(future, result=flushed)

    def stop(self) -> None:
        """Serve what is queued, then stop the thread."""
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join()


def _settle(future: Future[int], result: int = 0, exception: BaseException | None = None) -> None:
    """Complete ``future`` unless its waiter cancelled it meanwhile (then nobody reads it)."""
    try:
        if exception is not None:
            future.set_exception(exception)
        else:
            future.set_result(result)
    except InvalidStateError:
        logger.debug("flush request completed after its waiter gave up")


class PeriodicService:
    """Runs ``task()`` every ``interval_s`` on a daemon thread until stopped; errors are logged."""

    def __init__(self, task: Callable[[], object], interval_s: float, name: str) -> None:
        self._task = task
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            started = time.monotonic()
            try:
                self._task()
            except Exception:  # a background service keeps running; the failure is logged loudly
                logger.exception("%s failed after %.3f s", self._thread.name, time.monotonic() - started)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


def flush_outcome(result: PutResult, error: BaseException | None) -> PutResult:
    """What a SYNC put whose flush wait ended with ``error`` (None: flushed) answers.

    A wait past ``syncFlushTimeout`` is FLUSH_DISK_TIMEOUT (the record is stored, its fsync
    still pending); a failed flush is SERVICE_NOT_AVAILABLE naming the disk error.

    >>> flush_outcome(PutResult(PutMessageStatus.PUT_OK), TimeoutError()).status.value
    'FLUSH_DISK_TIMEOUT'
    """
    if error is None:
        return result
    if isinstance(error, TimeoutError):
        return dataclasses.replace(
            result, status=PutMessageStatus.FLUSH_DISK_TIMEOUT, remark="flush did not finish within syncFlushTimeout"
        )
    return PutResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, f"the message was not flushed to disk: {error}")


class _Locks:
    """Several locks held together, taken in one order and released in the other."""

    def __init__(self, *locks: threading.Lock) -> None:
        self._locks = locks

    def __enter__(self) -> None:
        for lock in self._locks:
            lock.acquire()

    def __exit__(self, *exc_info: object) -> None:
        for lock in reversed(self._locks):
            lock.release()


class StoreFlush:
    """The flushes of one store, under one lock, and their fail-stop.

    The first failed fsync/msync sets ``disk_error``: from then on nothing is flushed and the
    checkpoint never advances (Linux marks the failed pages clean, so a later fsync would
    "succeed" without writing them); the store refuses puts until a restart recovers it.
    The CommitLog's syncs and the others (ConsumeQueues, index, checkpoint) each hold their
    own lock, so a SYNC put's group commit never waits behind the periodic queue flush (as
    RocketMQ's ``GroupCommitService`` and ``FlushConsumeQueueService``); ``lock`` takes both,
    so whoever deletes files or cuts the log waits for every sync without the store lock.
    """

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self.commitlog_lock = threading.Lock()
        self.queues_lock = threading.Lock()
        self.lock = _Locks(self.commitlog_lock, self.queues_lock)
        self.disk_error: str | None = None
        self._last_thorough = time.monotonic()
        self._last_thorough_queues = time.monotonic()
        self._last_thorough_commit = time.monotonic()
        # With a TransientStorePool: the store timestamp every committed record is at or before.
        self._committed_timestamp = 0

    def fail_stop(self, error: BaseException) -> None:
        """Turn the store read-only after a failed fsync/msync (logged once, loudly)."""
        if self.disk_error is None:
            self.disk_error = str(error)
            logger.critical(
                "disk error in store %s: %s. The store is now read-only: puts are refused, reads go on, "
                "the checkpoint no longer advances. Restart once the disk is repaired: recovery "
                "rebuilds from the CommitLog.",
                self.store.config.root_dir,
                error,
            )

    def flush_commitlog(self) -> int:
        """Sync the CommitLog; return the flushed offset. Raises :class:`DiskError` once failed."""
        store = self.store
        with self.commitlog_lock:
            if self.disk_error is not None:
                raise DiskError(f"the store is read-only after a disk error: {self.disk_error}")
            covered = store._last_store_timestamp  # the flusher is part of the store
            if store.transient_pool is not None:
                covered = self._committed_timestamp  # a flush covers committed records only
            try:
                flushed = store.commitlog.flush()
            except DiskError as exc:
                self.fail_stop(exc)
                raise
            if store.checkpoint is not None and covered:
                store.checkpoint.physic_msg_timestamp = covered
            return flushed

    def commit_commitlog(self, least_pages: int = 0) -> None:
        """Write the CommitLog's buffered appends into its files (``CommitRealTimeService``),
        then give back the buffers of full segments. Raises :class:`DiskError` once failed."""
        store = self.store
        with self.lock:
            if self.disk_error is not None:
                raise DiskError(f"the store is read-only after a disk error: {self.disk_error}")
            covered = store._last_store_timestamp
            try:
                if store.commitlog.queue.commit(least_pages):
                    self._committed_timestamp = covered
            except DiskError as exc:
                self.fail_stop(exc)
                raise
        with store._lock:  # no read holds a view of a buffer then
            store.commitlog.queue.release_committed()

    def commit_commitlog_if_due(self) -> None:
        """The commit service's turn: commit when enough pages wait, everything at a thorough commit."""
        if self.disk_error is not None:
            return  # logged when it happened
        cfg = self.store.config
        thorough = time.monotonic() - self._last_thorough_commit >= cfg.commit_commitlog_thorough_interval_ms / 1000
        self.commit_commitlog(0 if thorough else cfg.commit_commitlog_least_pages)
        if thorough:
            self._last_thorough_commit = time.monotonic()

    def flush_commitlog_if_due(self) -> None:
        """ASYNC flush: sync when enough pages are dirty, or any are and a thorough flush is due."""
        if self.disk_error is not None:
            return  # logged when it happened
        cfg, commitlog = self.store.config, self.store.commitlog
        dirty = commitlog.queue.unflushed_bytes
        thorough = time.monotonic() - self._last_thorough >= cfg.flush_commitlog_thorough_interval_ms / 1000
        if dirty >= cfg.flush_commitlog_least_pages * PAGE_BYTES or (thorough and dirty > 0):
            self.flush_commitlog()
            self._last_thorough = time.monotonic()

    def flush_indexes_if_due(self) -> None:
        """The periodic ConsumeQueue flush (RocketMQ's ``FlushConsumeQueueService``): a queue is synced
        once ``flushConsumeQueueLeastPages`` of its units wait, and every queue with any at a thorough
        flush (every ``flushConsumeQueueThoroughInterval``). With a thousand queues each taking a few
        units a second, one msync per queue per interval was most of the broker's flush work."""
        cfg = self.store.config
        now = time.monotonic()
        if now - self._last_thorough_queues >= cfg.flush_consume_queue_thorough_interval_ms / 1000:
            self.flush_indexes()
            self._last_thorough_queues = now
        else:
            self.flush_indexes(cfg.flush_consume_queue_least_pages * PAGE_BYTES)

    def flush_indexes(self, least_bytes: int = 0) -> None:
        """Sync every ConsumeQueue, the index, then the checkpoint. With ``least_bytes``, only the
        queues with at least that many unflushed bytes: the checkpoint's ConsumeQueue time then stays
        where the last full flush put it (recovery after a power loss replays from there)."""
        store = self.store
        with store._lock:
            covered = store._last_dispatched_timestamp
            queues = list(store._queues.values())
        with self.queues_lock:
            if self.disk_error is not None:
                return  # logged when it happened; nothing may advance the checkpoint now
            try:
                for queue in queues:
                    queue.flush(least_bytes)
                store.index.flush()
                if store.checkpoint is not None:
                    if covered and least_bytes <= 0:
                        store.checkpoint.logics_msg_timestamp = covered
                    store.checkpoint.flush()
            except (DiskError, OSError) as exc:
                self.fail_stop(exc)
                raise

    def flush_all(self) -> None:
        """The CommitLog (its buffered appends committed first), then every ConsumeQueue, the index
        and the checkpoint."""
        if self.store.transient_pool is not None:
            self.commit_commitlog()
        self.flush_commitlog()
        self.flush_indexes()

    def close_checkpoint(self) -> None:
        """Write and close the checkpoint; after a disk error its own msync may fail too, which
        must not keep the store from closing (its fields only hold what flushes covered)."""
        checkpoint = self.store.checkpoint
        if checkpoint is None:
            return
        try:
            checkpoint.close()
        except OSError as exc:
            if self.disk_error is None:
                raise
            logger.error("checkpoint %s not written on close after the disk error: %s", checkpoint.path, exc)
