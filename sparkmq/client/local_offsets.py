"""Local offsets of a BROADCASTING consumer: every member keeps its own progress in a JSON file
(RocketMQ's ``LocalFileOffsetStore``), written whole to a temporary file and renamed into place."""

from __future__ import annotations

import json
import os
from pathlib import Path

from sparkmq.errors import OffsetStoreError
from sparkmq.protocol.bodies import MessageQueue


class LocalOffsetFile:
    """``path`` holds a list of ``{"topic", "brokerName", "queueId", "offset"}`` entries.

    Example::

        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as directory:
        ...     offsets = LocalOffsetFile(Path(directory) / "c1-G.json")
        ...     offsets.save({MessageQueue("T", "broker-a", 0): 42})
        ...     offsets.load()
        {MessageQueue(topic='T', broker_name='broker-a', queue_id=0): 42}
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[MessageQueue, int]:
        """The saved offsets ({} when the file does not exist yet)."""
        if not self.path.exists():
            return {}
        try:
            entries = json.loads(self.path.read_text(encoding="utf-8"))
            return {MessageQueue(e["topic"], e["brokerName"], e["queueId"]): int(e["offset"]) for e in entries}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise OffsetStoreError(f"local offsets {self.path} cannot be read: {exc}") from exc

    def save(self, offsets: dict[MessageQueue, int]) -> None:
        entries = [dict(queue.to_json(), offset=offset) for queue, offset in offsets.items()]
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(entries), encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError as exc:
            raise OffsetStoreError(f"local offsets {self.path} cannot be written: {exc}") from exc
