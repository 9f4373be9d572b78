"""Bounded waits that neither swallow a cancellation nor leak what they waited for.

Python 3.11's ``asyncio.wait_for`` can return a result while its caller is being cancelled (the
cancel is lost), and a ``wait_for(lock.acquire(), t)`` that times out just as the lock is granted
can leave the lock held by nobody. ``asyncio.wait`` never cancels what it waits on, so these two
build on it.
"""

from __future__ import annotations

import asyncio
from typing import Any


async def done_within(future: asyncio.Future[Any], timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for ``future`` (which is never cancelled here); True when it is done.

    >>> async def demo():
    ...     loop = asyncio.get_running_loop()
    ...     late, soon = loop.create_future(), loop.create_future()
    ...     loop.call_soon(soon.set_result, 1)
    ...     return await done_within(late, 0.01), await done_within(soon, 1.0), late.cancelled()
    >>> asyncio.run(demo())
    (False, True, False)
    """
    if not future.done():
        await asyncio.wait((future,), timeout=timeout_s)
    return future.done()


async def acquire_within(lock: asyncio.Lock, timeout_s: float) -> bool:
    """Acquire ``lock`` within ``timeout_s``; True when this caller now holds it. On a timeout or a
    cancellation of the caller the lock is not held on its behalf, whatever the timing: an acquire
    granted just as it was given up is released again at once."""
    acquiring = asyncio.ensure_future(lock.acquire())
    try:
        if await done_within(acquiring, timeout_s):
            return acquiring.exception() is None
    except asyncio.CancelledError:
        _give_up(lock, acquiring)
        raise
    _give_up(lock, acquiring)
    return False


def _give_up(lock: asyncio.Lock, acquiring: asyncio.Future[Any]) -> None:
    def release_if_granted(done: asyncio.Future[Any]) -> None:
        if not done.cancelled() and done.exception() is None:
            lock.release()

    acquiring.cancel()
    acquiring.add_done_callback(release_if_granted)
