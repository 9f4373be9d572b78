"""What one peer, and all peers together, may cost a server: the limits and their budget.

Each number says where it comes from. A connection beyond a limit is closed (and logged); it
never slows the others. Example::

    >>> ServerLimits(idle_timeout_s=1.0).frame_deadline_s
    60.0
    >>> budget = FrameBudget(100); budget.charge(70), budget.charge(40), budget.used
    (True, False, 110)
"""

from __future__ import annotations

import math
import resource
from dataclasses import dataclass

from sparkmq.errors import ConfigError
from sparkmq.protocol import MAX_FRAME_BYTES

#: ``NettyServerConfig.serverChannelMaxIdleTimeSeconds``: Java closes a channel idle this long.
IDLE_TIMEOUT_S = 120.0
#: How long a frame that started arriving may take to finish (slow-loris). Java has no such
#: deadline; 60 s moves a whole 16 MiB frame at ~2.2 Mbit/s.
FRAME_DEADLINE_S = 60.0
#: Unfinished frames held across every connection of one server: eight maximum frames. Without
#: it, 40 connections each holding an unfinished ~16 MiB frame cost +630 MB.
MAX_BUFFERED_FRAME_BYTES = 8 * MAX_FRAME_BYTES
#: Requests of one connection being served at once; reading pauses above it (bounded buffering).
MAX_IN_FLIGHT_REQUESTS = 1024
#: Share of the process's descriptor limit that connections may take when no limit is set:
#: the rest stays for the store (one descriptor per mapped file) and persisted tables.
CONNECTION_SHARE_OF_FDS = 0.5


def default_max_connections() -> int:
    """Half the soft ``RLIMIT_NOFILE`` (at least 16), or 65,536 when it is unlimited."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 65_536
    return max(16, int(soft * CONNECTION_SHARE_OF_FDS))


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """Per-server limits on connections; ``None`` turns a time limit off.

    ``max_connections=None`` means :func:`default_max_connections` at server start.
    """

    max_connections: int | None = None
    idle_timeout_s: float | None = IDLE_TIMEOUT_S
    frame_deadline_s: float | None = FRAME_DEADLINE_S
    max_buffered_frame_bytes: int = MAX_BUFFERED_FRAME_BYTES

    def __post_init__(self) -> None:
        if self.max_connections is not None and self.max_connections < 1:
            raise ConfigError(f"max_connections must be at least 1, got {self.max_connections}")
        for name in ("idle_timeout_s", "frame_deadline_s"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ConfigError(f"{name} must be a positive number of seconds, got {value}")
        if self.max_buffered_frame_bytes < MAX_FRAME_BYTES:
            raise ConfigError(
                f"max_buffered_frame_bytes must hold one whole frame ({MAX_FRAME_BYTES}), "
                f"got {self.max_buffered_frame_bytes}"
            )


class FrameBudget:
    """Bytes of unfinished frames buffered by all connections of one server, against a cap."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def charge(self, delta: int) -> bool:
        """Add ``delta`` (negative to release); False when the total is now over the cap."""
        self.used += delta
        return self.used <= self.limit


__all__ = [
    "CONNECTION_SHARE_OF_FDS",
    "FRAME_DEADLINE_S",
    "IDLE_TIMEOUT_S",
    "MAX_BUFFERED_FRAME_BYTES",
    "FrameBudget",
    "ServerLimits",
    "default_max_connections",
]
