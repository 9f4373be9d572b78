"""Periodic client work (route refresh, heartbeats, rebalance, offset commits) on the event loop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from sparkmq.errors import SparkmqError

logger = logging.getLogger(__name__)


async def run_every(interval_s: float, action: Callable[[], Awaitable[object]], owner: str) -> None:
    """Await ``action()`` every ``interval_s`` until cancelled.

    A failure of the error tree is logged and the next round tries again (brokers come and
    go); anything else is a bug and ends the loop with its traceback.
    """
    while True:
        await asyncio.sleep(interval_s)
        try:
            await action()
        except SparkmqError as exc:
            logger.warning("%s: periodic %s failed: %s", owner, getattr(action, "__name__", action), exc.remark)
