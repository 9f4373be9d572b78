"""Periodic work on an event loop, with one error policy for every background loop of sparkmq.

Clients (route refresh, heartbeats, rebalance, offset commits), the broker (offset and table
persistence, client expiry, delayed delivery, NameServer registration) and the NameServer
(broker expiry scan) all run their background loops through :func:`run_every`:

* a failing iteration is logged with its traceback and the loop goes on with the next one
  (a background loop never dies from one bad round, whatever the exception);
* cancellation ends the loop (that is how owners stop it);
* :func:`stop_tasks` cancels loops at close and logs anything but a cancellation.

The store's flush thread (``store.flush.PeriodicService``) follows the same policy on a thread.

Example::

    >>> async def demo() -> int:
    ...     rounds = []
    ...     task = asyncio.get_running_loop().create_task(run_every(0.001, lambda: rounds.append(1), "demo"))
    ...     while len(rounds) < 3:
    ...         await asyncio.sleep(0.001)
    ...     await stop_tasks([task], "demo")
    ...     return len(rounds) >= 3
    >>> asyncio.run(demo())
    True
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable

logger = logging.getLogger(__name__)

Action = Callable[[], "Awaitable[object] | object"]


async def run_every(interval_s: float, action: Action, name: str, *, wake: asyncio.Event | None = None) -> None:
    """Run ``action()`` (awaiting it when it returns an awaitable) every ``interval_s`` until cancelled.

    With ``wake``, setting the event runs the next round at once instead of at the end of the
    interval. A round that raises is logged with its traceback and the next round runs as usual.
    """
    while True:
        if wake is None:
            await asyncio.sleep(interval_s)
        else:
            try:
                await asyncio.wait_for(wake.wait(), interval_s)
            except TimeoutError:
                pass
            wake.clear()
        await run_once(action, name)


async def run_once(action: Action, name: str) -> bool:
    """One round of ``action`` under :func:`run_every`'s policy; True when it succeeded."""
    try:
        outcome = action()
        if inspect.isawaitable(outcome):
            await outcome
    except Exception:  # the policy: log with the traceback, go on with the next round
        logger.exception("periodic task %s failed; it runs again next round", name)
        return False
    return True


async def stop_tasks(tasks: Iterable[asyncio.Task[None]], owner: str) -> None:
    """Cancel ``tasks``, wait for them, and log every way one ended other than by cancellation."""
    pending = list(tasks)
    for task in pending:
        task.cancel()
    results = await asyncio.gather(*pending, return_exceptions=True)
    for task, result in zip(pending, results):
        if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
            logger.error("%s: background task %s ended with an error", owner, task.get_name(), exc_info=result)
