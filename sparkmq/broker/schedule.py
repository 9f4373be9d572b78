"""ScheduleMessageService: delivers delayed messages from SCHEDULE_TOPIC_XXXX when they are due.

Queue ``level - 1`` of the schedule topic holds the messages of delay level ``level``; their
ConsumeQueue tagsCode is the deliver time. Each pass reads every level from its progress
offset, re-puts due messages to REAL_TOPIC / REAL_QID without the DELAY property, and keeps
the progress in config/delayOffset.json.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from sparkmq.config_file import ConfigFile
from sparkmq.errors import ConfigError
from sparkmq.message.names import SCHEDULE_TOPIC
from sparkmq.message.properties import DELAY_TIME_LEVEL, REAL_QUEUE_ID, REAL_TOPIC, encode_properties
from sparkmq.message.record import MessageBatch
from sparkmq.protocol import fastjson
from sparkmq.store import MessageStore
from sparkmq.store.consume_queue import BLANK_UNIT_SIZE

logger = logging.getLogger(__name__)
DELIVER_BATCH = 256


def _decode(text: str) -> dict[int, int]:
    """delayOffset.json as Java writes it too (fastjson: unquoted integer keys)."""
    document = fastjson.as_object(fastjson.loads(text, what="delayOffset.json"), "delayOffset.json")
    table = fastjson.as_object(document.get("offsetTable", {}), "delayOffset.json.offsetTable")
    return {
        fastjson.as_int(level, f"offsetTable key {level!r}"): fastjson.as_int(offset, f"offsetTable.{level}")
        for level, offset in table.items()
    }


def _encode(offsets: dict[int, int]) -> str:
    return json.dumps({"offsetTable": {str(k): v for k, v in sorted(offsets.items())}}, indent="\t")


class ScheduleMessageService:
    """Per-level progress over the schedule topic; ``deliver_due()`` does one pass."""

    def __init__(self, store: MessageStore, path: Path, levels: int) -> None:
        self.store = store
        self.levels = levels
        self._file: ConfigFile[dict[int, int]] = ConfigFile(path, _decode, _encode, ConfigError)
        self.offsets: dict[int, int] = {}
        self.version = 0  # bumped when progress moved; the broker's persister writes delayOffset.json

    def load(self) -> None:
        self.offsets = self._file.load() or {}

    def snapshot(self) -> dict[int, int]:
        """A copy of the progress to write from another thread."""
        return dict(self.offsets)

    def write(self, snapshot: dict[int, int]) -> None:
        """Write a :meth:`snapshot` to delayOffset.json (blocking: fsyncs)."""
        self._file.persist(snapshot)

    def deliver_due(self, now_ms: int | None = None) -> int:
        """Deliver every due message of every level; return how many were delivered."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        before = dict(self.offsets)
        delivered = 0
        for level in range(1, self.levels + 1):
            delivered += self._deliver_level(level, now)
        if self.offsets != before:
            self.version += 1
        return delivered

    def _deliver_level(self, level: int, now: int) -> int:
        queue = self.store.consume_queue(SCHEDULE_TOPIC, level - 1)
        if queue is None:
            return 0
        offset = max(self.offsets.get(level, 0), queue.min_offset)
        delivered = 0
        while offset < queue.max_offset:
            units = queue.read_units(offset, DELIVER_BATCH)
            for unit in units:
                if int(unit["size"]) != BLANK_UNIT_SIZE:
                    if int(unit["tags_code"]) > now:
                        self.offsets[level] = offset
                        return delivered
                    self._redeliver(int(unit["offset"]))
                    delivered += 1
                offset += 1
            self.offsets[level] = offset
        return delivered

    def _redeliver(self, physical_offset: int) -> None:
        message = self.store.look_message_by_offset(physical_offset)
        if message is None:
            logger.warning("delayed message at %d is gone (retention); skipped", physical_offset)
            return
        props = message.properties
        props.pop(DELAY_TIME_LEVEL, None)
        props["WAIT"] = "false"
        topic, queue_id = props.get(REAL_TOPIC), props.get(REAL_QUEUE_ID, "0")
        if not topic or not queue_id.isdigit():
            logger.error("delayed message at %d has no REAL_TOPIC/REAL_QID; dropped", physical_offset)
            return
        batch = MessageBatch(
            topic,
            int(queue_id),
            [bytes(message.body)],
            [encode_properties(props)],
            [message.flag],
            message.sys_flag,
            message.born_timestamp,
            message.born_host,
            message.reconsume_times,
        )
        result, _flushed = self.store.submit_messages(batch)  # WAIT=false: no flush wait, as in RocketMQ
        if not result.ok:
            logger.error(
                "re-putting delayed message at %d failed: %s %s", physical_offset, result.status, result.remark
            )
