"""One background event loop per process, for the blocking client facades."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

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
