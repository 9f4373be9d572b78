"""One background event loop per process, for the blocking client facades."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, Generic, TypeVar

T = TypeVar("T")
_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop when it is installed (its loop, transports and callbacks run in C: a blocking
    send spends less CPU and time in the loop), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def background_loop() -> asyncio.AbstractEventLoop:
    """The process's client loop, started on a daemon thread at first use."""
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = new_event_loop()
            threading.Thread(target=loop.run_forever, name="sparkmq-client-loop", daemon=True).start()
            _loop = loop
        return _loop


def submit(coro: Coroutine[Any, Any, T]) -> Future[T]:
    """Schedule ``coro`` on the client loop; a concurrent future of its result."""
    return asyncio.run_coroutine_threadsafe(coro, background_loop())


def run(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run ``coro`` on the client loop and wait for its result (never call from that loop)."""
    return submit(coro).result(timeout)


class Handoff(Generic[T]):
    """The outcome of one call the client loop completes for one waiting thread: the part of a
    ``concurrent.futures.Future`` a blocking send uses (``set_running_or_notify_cancel``, ``done``,
    ``set_result``, ``set_exception``, ``result``), on one bare lock instead of a Condition.

    A blocking ``Producer.send`` waits here: the loop thread's completion is one lock release and
    the caller's wait one lock acquire, with no Condition, waiter list or callbacks between them
    (the ``Future``'s cost a thread hand-off pays twice per send, and while the caller still holds
    the GIL the loop thread it just woke waits for it). Not cancellable; one waiter only.
    """

    __slots__ = ("_error", "_lock", "_value")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()  # released once, by the completion
        self._value: T | None = None
        self._error: BaseException | None = None

    def set_running_or_notify_cancel(self) -> bool:
        return True

    def done(self) -> bool:
        return not self._lock.locked()

    def set_result(self, value: T) -> None:
        self._value = value
        self._lock.release()

    def set_exception(self, error: BaseException) -> None:
        self._error = error
        self._lock.release()

    def outcome(self) -> tuple[T | None, BaseException | None]:
        """The value and the error as set, without waiting (call it once :meth:`done`)."""
        return self._value, self._error

    def result(self, timeout: float | None = None) -> T:
        """The value, once set (raises what was set instead); ``TimeoutError`` after ``timeout`` seconds."""
        if not self._lock.acquire(timeout=-1 if timeout is None else timeout):
            raise TimeoutError(f"no outcome within {timeout} s")
        self._lock.release()  # done() stays True; a second result() returns at once
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]  # set_result stored a T
