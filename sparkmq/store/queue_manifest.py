"""QueueManifest: the (topic, queue id) pairs that have ConsumeQueues, kept beside them.

A ConsumeQueue directory that vanished leaves no trace among the others; this list lets
start-up notice it and rebuild the queue from the CommitLog. A new queue appends one line
(no fsync: it is rare, and the list is rewritten and synced at every start); deleting
topics rewrites the list. Lines are ``topic<TAB>queue_id``; topic names never hold a tab.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from pathlib import Path

from sparkmq.errors import StoreIOError
from sparkmq.store.disk import store_io

QueueKey = tuple[str, int]


class QueueManifest:
    """The manifest file at ``path`` (``consumequeue/queues``)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> set[QueueKey]:
        """The pairs listed; a torn last line (a crash while appending) is skipped."""
        try:
            with store_io(f"reading the queue manifest {self.path}"):
                text = self.path.read_text("utf-8", errors="replace")
        except StoreIOError as exc:
            if exc.errno == errno.ENOENT:
                return set()
            raise
        keys: set[QueueKey] = set()
        for line in text.splitlines():
            topic, _, queue_id = line.partition("\t")
            if topic and queue_id.isdigit():
                keys.add((topic, int(queue_id)))
        return keys

    def add(self, key: QueueKey) -> None:
        """Append one pair."""
        with store_io(f"appending to the queue manifest {self.path}"):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as manifest:
                manifest.write(f"{key[0]}\t{key[1]}\n")

    def rewrite(self, keys: Iterable[QueueKey]) -> None:
        """Replace the list with ``keys``: temporary file, fsync, rename, fsync of the directory."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        with store_io(f"rewriting the queue manifest {self.path}"):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with tmp.open("w", encoding="utf-8") as manifest:
                manifest.writelines(f"{topic}\t{queue_id}\n" for topic, queue_id in sorted(keys))
                manifest.flush()
                os.fsync(manifest.fileno())
            os.replace(tmp, self.path)
            directory = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
