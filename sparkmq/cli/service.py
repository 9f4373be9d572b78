"""Running a long-lived service from the command line: start, wait for SIGTERM/SIGINT, close."""

from __future__ import annotations

import asyncio
import ctypes
import gc
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import Protocol

logger = logging.getLogger(__name__)


class Service(Protocol):
    """What ``run_service`` drives: an async start and an async, idempotent close."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...


async def serve_until_signalled(
    service: Service, ready_line: str | None = None, ready_line_of: Callable[[], str] | None = None
) -> None:
    """Start ``service``, print its ready line (flushed) once listening, close on SIGTERM/SIGINT.

    ``ready_line_of`` builds the line after start, when e.g. a free port has been bound.
    """
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await service.start()
    settle_gc()
    keep_freed_memory()
    line = ready_line_of() if ready_line_of is not None else ready_line
    if line:  # one write: a log line from another thread (often the same pipe) never splits it
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    try:
        await stop.wait()
        logger.info("signal received: shutting down")
    finally:
        await service.close()


def settle_gc() -> None:
    """Collect the start-up's garbage, then freeze what survives (``gc.freeze``) out of later collections.

    A service builds tens of thousands of long-lived objects at start (modules, config, the
    store's tables, the processors) and afterwards allocates few that survive: a lone send makes
    no cyclic garbage, and ``sparkmq dev`` saw one generation-0 collection in 5 s of them. But every
    generation-2 collection traversed all of the start-up's objects: 17-50 ms with the event loop
    stopped, every request in flight waiting (``bench/latency_bench.py``; docs/design-notes.md,
    "Frozen start-up heap"). Frozen, they are never traversed again, so that collection takes
    microseconds. They are still freed by reference counting; only a reference cycle among them
    that the service drops later would never be (a service keeps its start-up objects for life).
    """
    gc.collect()
    gc.freeze()


#: glibc's mallopt parameters (malloc.h) and the values a service sets.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: Blocks up to a whole frame (MAX_FRAME_BYTES, 16 MiB) come from the heap, not from a fresh mmap.
MMAP_THRESHOLD_BYTES = 16 * 1024 * 1024
#: Freed heap memory kept for the next answers rather than returned to the kernel (RSS stays up to this).
TRIM_THRESHOLD_BYTES = 64 * 1024 * 1024


def keep_freed_memory() -> bool:
    """Make glibc's malloc reuse the memory of freed large blocks (False: not glibc, nothing set).

    A pull answer is a fresh ~1 MiB bytes (the records copied out of the CommitLog), a lane's
    answers to pipelined pulls one of up to 8 MiB. glibc serves blocks above its mmap threshold
    (128 KiB, raised only as far as the largest block freed so far) with a new mapping each, and
    trims the heap's top once more than twice that is free: every answer then faulted in fresh
    zeroed pages, up to 256 page faults per MiB. Measured on pipelined 4096-record pulls
    (docs/design-notes.md, "Services keep freed memory") that was most of the broker's system time.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )


#: ``SPARKMQ_EVENT_LOOP``: ``auto`` (uvloop when importable), ``uvloop`` (required) or ``asyncio``.
EVENT_LOOP_ENV = "SPARKMQ_EVENT_LOOP"


def loop_factory(choice: str | None = None) -> Callable[[], asyncio.AbstractEventLoop]:
    """The event loop a service runs on: uvloop when importable (``auto``), unless told otherwise.

    uvloop runs the loop, the transports and their callbacks in C (docs/design-notes.md,
    "uvloop"). ``choice`` defaults to ``$SPARKMQ_EVENT_LOOP`` or ``auto``.
    """
    choice = (choice or os.environ.get(EVENT_LOOP_ENV) or "auto").lower()
    if choice not in ("auto", "uvloop", "asyncio"):
        raise ValueError(f"{EVENT_LOOP_ENV} must be auto, uvloop or asyncio, got {choice!r}")
    if choice != "asyncio":
        try:
            import uvloop
        except ImportError:
            if choice == "uvloop":
                raise
            logger.info("uvloop is not installed: running on asyncio's own event loop")
        else:
            return uvloop.new_event_loop
    return asyncio.new_event_loop


def run_service(service: Service, ready_line: str | None = None, ready_line_of: Callable[[], str] | None = None) -> int:
    """Run ``service`` until SIGTERM/SIGINT on :func:`loop_factory`'s loop; exit code 0 after a clean close."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        runner.run(serve_until_signalled(service, ready_line, ready_line_of))
    return 0
