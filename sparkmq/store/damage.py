"""Damage found in the store's files: logged once where it is found, counted for the broker's metrics.

Every length, offset and count read from a file is checked before use; what fails a check is
reported here with its file and position, then healed from the CommitLog (ConsumeQueue units,
IndexFile entries) or skipped (a CommitLog record whose body fails its CRC); a slave refuses
replicated bytes that fail a check.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter

logger = logging.getLogger(__name__)

CONSUME_QUEUE = "consumequeue"
INDEX_FILE = "indexfile"
COMMIT_LOG = "commitlog"
REPLICA = "replica"  # bytes a slave received from its master (refused, never stored)


class DamageReport:
    """Counts of damage found, by file kind and outcome (``repaired``, ``lost``, ``skipped``, ``rebuilt``)."""

    def __init__(self) -> None:
        self._counts: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def found(self, kind: str, outcome: str, where: str, detail: str) -> None:
        """Log one damaged item (``where``: its file and position) and count it."""
        logger.warning("damaged %s at %s: %s (%s)", kind, where, detail, outcome)
        with self._lock:
            self._counts[kind, outcome] += 1

    def counts(self) -> dict[tuple[str, str], int]:
        """A snapshot: (kind, outcome) -> how many."""
        with self._lock:
            return dict(self._counts)
