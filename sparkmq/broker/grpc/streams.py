"""Writing to a client's stream with a deadline, so a client that stops reading cannot hold a servicer.

A stream's write waits while HTTP/2 flow control says the client's window is full (grpcio buffers
about a window's worth); the servicers write one message at a time through :func:`deliver`, so
what a stream holds is bounded by that window and the servicer's own small queue. A write that
does not finish within ``SEND_STALL_S`` ends the stream with DEADLINE_EXCEEDED and a reason.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

SEND_STALL_S = 30.0  # a client that reads nothing for this long loses its stream
FIRST_SETTINGS_S = 30.0  # a Telemetry stream must send its client's Settings within this
TELEMETRY_QUEUE = 64  # commands waiting for a Telemetry client to read; check-backs beyond it are dropped


async def deliver(context: Any, message: Any) -> bool:
    """Write ``message``; False when the client did not take it within ``SEND_STALL_S``."""
    try:
        await asyncio.wait_for(context.write(message), SEND_STALL_S)
    except TimeoutError:
        return False
    return True


async def end_stalled(context: Any) -> None:
    """End the stream of a client that stopped reading (raises, as ``context.abort`` does)."""
    await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, f"the client read nothing for {SEND_STALL_S:g} s")
