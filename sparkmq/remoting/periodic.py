"""Periodic work on an event loop, with one error policy for every background loop of sparkmq.

Clients (route refresh, heartbeats, rebalance, offset commits), the broker (offset and table
persistence, client expiry, delayed delivery, NameServer registration) and the NameServer
(broker expiry scan) all run their background loops through :func:`run_every`:

* a failing iteration is logged with its traceback and the loop goes on with the next one
  (a background loop never dies from one bad round, whatever the exception);
* a peer that cannot be reached (a retriable :class:`~sparkmq.errors.SparkmqError`: connection
  refused, timeout, busy) is an expected condition, not a bug: the first such round of a streak
  logs one WARNING line without a traceback, the rounds after it log at DEBUG, and the first round
  that succeeds again logs at INFO how many rounds failed;
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
from typing import Any

from sparkmq.errors import SparkmqError

logger = logging.getLogger(__name__)

RECANCEL_AFTER_S = 1.0
Action = Callable[[], "Awaitable[object] | object"]


async def run_every(interval_s: float, action: Action, name: str, *, wake: asyncio.Event | None = None) -> None:
    """Run ``action()`` (awaiting it when it returns an awaitable) every ``interval_s`` until cancelled.

    With ``wake``, setting the event runs the next round at once instead of at the end of the
    interval. A round that raises is logged with its traceback and the next round runs as usual.
    """
    unreachable = _Streak(name)
    while True:
        if wake is None:
            await asyncio.sleep(interval_s)
        else:
            await _wait_or_wake(interval_s, wake)
            wake.clear()
        await run_once(action, name, unreachable)
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            # The round swallowed our cancellation (asyncio.wait_for does, on Python 3.11, when
            # its future completes at the same moment): stop anyway.
            raise asyncio.CancelledError


async def _wait_or_wake(interval_s: float, wake: asyncio.Event) -> None:
    # Not asyncio.wait_for: on Python 3.11 it can swallow a cancel that races its timeout,
    # and the loop then never stops.
    timer = asyncio.get_running_loop().call_later(interval_s, wake.set)
    try:
        await wake.wait()
    finally:
        timer.cancel()


class _Streak:
    """Consecutive rounds of one loop that failed because a peer could not be reached."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.failed = 0

    def fail(self, exc: SparkmqError) -> None:
        self.failed += 1
        level = logging.WARNING if self.failed == 1 else logging.DEBUG
        logger.log(level, "background task %s failed (%s); it retries every round", self.name, exc.remark)

    def succeed(self) -> None:
        if self.failed:
            logger.info("background task %s succeeded again after %d failed rounds", self.name, self.failed)
            self.failed = 0


async def run_once(action: Action, name: str, unreachable: _Streak | None = None) -> bool:
    """One round of ``action`` under :func:`run_every`'s policy; True when it succeeded.

    ``unreachable`` is the loop's streak of retriable failures (a lone round starts its own).
    """
    streak = unreachable if unreachable is not None else _Streak(name)
    try:
        outcome = action()
        if inspect.isawaitable(outcome):
            await outcome
    except SparkmqError as exc:
        if not exc.retriable:
            logger.exception("background task %s failed; its loop goes on", name)
        else:
            streak.fail(exc)
        return False
    except Exception:  # the policy: log with the traceback, go on with the next round
        logger.exception("background task %s failed; its loop goes on", name)
        return False
    streak.succeed()
    return True


async def stop_tasks(tasks: Iterable[asyncio.Task[Any]], owner: str) -> None:
    """Cancel ``tasks``, wait for them, and log every way one ended other than by cancellation."""
    stopping = set(tasks)
    everything = list(stopping)
    while stopping:  # cancel again what swallowed a cancellation (see run_every)
        for task in stopping:
            task.cancel()
        _done, stopping = await asyncio.wait(stopping, timeout=RECANCEL_AFTER_S)
    for task in everything:
        if not task.cancelled() and task.exception() is not None:
            logger.error(
                "%s: background task %s ended with an error", owner, task.get_name(), exc_info=task.exception()
            )
