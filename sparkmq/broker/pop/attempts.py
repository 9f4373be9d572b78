"""The answers of recent pops by the client's attempt id, so a retried receive gets the same messages.

A 5.x client names each receive with an ``attempt_id`` and sends the same id again when it retries
after a timeout (its answer may have been popped and lost on the way). The pop's answer is kept
until its invisible time passes, at most ``MAX_KEPT`` answers (the oldest go first).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

MAX_KEPT = 1024


@dataclass(frozen=True, slots=True)
class Attempt:
    """What one pop answered: its checkpoints' ids and when its messages turn visible again."""

    ck_ids: tuple[int, ...]
    until_ms: int


class Attempts:
    """Recent pop answers by (group, topic, attempt id)."""

    def __init__(self) -> None:
        self._kept: OrderedDict[tuple[str, str, str], Attempt] = OrderedDict()

    def remember(self, group: str, topic: str, attempt_id: str, ck_ids: tuple[int, ...], until_ms: int) -> None:
        key = (group, topic, attempt_id)
        self._kept.pop(key, None)
        self._kept[key] = Attempt(ck_ids, until_ms)
        while len(self._kept) > MAX_KEPT:
            self._kept.popitem(last=False)

    def answered(self, group: str, topic: str, attempt_id: str, now_ms: int) -> Attempt | None:
        """The kept answer of this attempt, None when there is none or its messages are visible again."""
        key = (group, topic, attempt_id)
        attempt = self._kept.get(key)
        if attempt is not None and attempt.until_ms <= now_ms:
            del self._kept[key]
            return None
        return attempt
