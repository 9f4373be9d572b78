"""Running a long-lived service from the command line: start, wait for SIGTERM/SIGINT, close."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from typing import Protocol

logger = logging.getLogger(__name__)


class Service(Protocol):
    """What ``run_service`` drives: an async start and an async, idempotent close."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...


async def serve_until_signalled(service: Service, ready_line: str | None = None,
                                ready_line_of: Callable[[], str] | None = None) -> None:
    """Start ``service``, print its ready line (flushed) once listening, close on SIGTERM/SIGINT.

    ``ready_line_of`` builds the line after start, when e.g. a free port has been bound.
    """
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await service.start()
    line = ready_line_of() if ready_line_of is not None else ready_line
    if line:
        print(line, flush=True)
    try:
        await stop.wait()
        logger.info("signal received: shutting down")
    finally:
        await service.close()


def run_service(service: Service, ready_line: str | None = None,
                ready_line_of: Callable[[], str] | None = None) -> int:
    """Run ``service`` until SIGTERM/SIGINT; exit code 0 after a clean close."""
    asyncio.run(serve_until_signalled(service, ready_line, ready_line_of))
    return 0
