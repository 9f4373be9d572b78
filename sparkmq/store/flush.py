"""Flush services: ASYNC (a background interval flush) and SYNC (group commit).

Group commit: each put asks for "flushed past offset X" and gets a future; one thread runs
an fsync covering every request queued so far and completes them all, so concurrent
writers share fsyncs (``CommitLog.GroupCommitService``).

A waiter may give up on its future (a timed-out SYNC send); completing such a future is not
an error, and nothing a future or a flush does can end the group-commit thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError

logger = logging.getLogger(__name__)


class GroupCommitService:
    """Completes ``request(offset)`` futures once ``flush()`` has covered ``offset``."""

    def __init__(self, flush: Callable[[], int], name: str = "sparkmq-group-commit") -> None:
        self._flush = flush
        self._pending: list[tuple[int, Future[int]]] = []
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

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
            self._cond.notify()
        return future

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stopped:
                    self._cond.wait()
                if self._stopped and not self._pending:
                    return
                batch, self._pending = self._pending, []
            try:
                self._complete(batch)
            except Exception:  # the thread outlives any one batch; the batch's waiters time out
                logger.exception("group commit failed to complete %d requests", len(batch))

    def _complete(self, batch: list[tuple[int, Future[int]]]) -> None:
        try:
            flushed = self._flush()
        except Exception as exc:  # every waiter must learn that its flush failed
            logger.error("group commit flush failed: %s", exc)
            for _offset, future in batch:
                _settle(future, exception=exc)
            return
        late = []
        for offset, future in batch:
            if future.done():
                continue  # its waiter gave up
            if flushed >= offset:
                _settle(future, result=flushed)
            else:
                late.append((offset, future))
        if late:
            with self._cond:
                self._pending[:0] = late

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

    def __init__(self, task: Callable[[], None], interval_s: float, name: str) -> None:
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
