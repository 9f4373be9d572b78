"""LagHistory: consumer groups' lag sampled every few seconds, kept for the dashboard's chart.

>>> history = LagHistory(max_samples=3)
>>> for t, lag in ((1.0, 5), (2.0, 4), (3.0, 2), (4.0, 0)):
...     history.record("billing", t, lag, {})
>>> history.points("billing")
[(2.0, 4), (3.0, 2), (4.0, 0)]
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from sparkmq.protocol.bodies import MessageQueue

DEFAULT_MAX_SAMPLES = 720  # an hour at one sample every 5 s


@dataclass
class GroupLag:
    """One group's samples: (unix seconds, total lag), and the latest per-queue lag."""

    samples: deque[tuple[float, int]]
    per_queue: dict[MessageQueue, int] = field(default_factory=dict)


class LagHistory:
    """Bounded lag samples per group (oldest dropped first)."""

    def __init__(self, max_samples: int = DEFAULT_MAX_SAMPLES) -> None:
        self.max_samples = max_samples
        self.groups: dict[str, GroupLag] = {}

    def record(self, group: str, at: float, total: int, per_queue: dict[MessageQueue, int]) -> None:
        entry = self.groups.setdefault(group, GroupLag(deque(maxlen=self.max_samples)))
        entry.samples.append((at, total))
        entry.per_queue = per_queue

    def points(self, group: str) -> list[tuple[float, int]]:
        entry = self.groups.get(group)
        return list(entry.samples) if entry else []
