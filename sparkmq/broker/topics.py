"""TopicConfigManager: the broker's topic table, persisted as config/topics.json.

Mirrors RocketMQ's ``TopicConfigManager``: system topics at start, TBW102 when auto-create
is on, auto-creation on send (queues = min(requested, TBW102's), perm without INHERIT),
a ``dataVersion`` bumped on every change so the NameServer sees it. Changes only bump
``version``; the broker's persister writes topics.json off the event loop (``persistence.py``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

from sparkmq.broker.validation import check_topic, check_topic_config
from sparkmq.config_file import ConfigFile
from sparkmq.errors import ConfigError, InvalidFieldError, TopicNotWritableError
from sparkmq.message.names import (
    AUTO_CREATE_TOPIC_KEY,
    NOT_ALLOWED_SEND_TOPICS,
    OFFSET_MOVED_EVENT,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    SYSTEM_TOPIC_PREFIX,
    SYSTEM_TOPICS,
)
from sparkmq.protocol import PermName
from sparkmq.protocol.namesrv_bodies import DataVersion, TopicConfig, TopicConfigSerializeWrapper
from sparkmq.tables.attributes import alter, parse_modification

SCHEDULE_QUEUES = 18
DEFAULT_MAX_QUEUE_NUMS = 1024  # maxTopicQueueNums
READ_WRITE = int(PermName.PERM_READ | PermName.PERM_WRITE)


class TopicConfigManager:
    """Topics by name; ``on_change`` runs after every change (re-register with NameServers)."""

    def __init__(
        self,
        path: Path,
        *,
        cluster_name: str,
        broker_name: str,
        auto_create: bool,
        default_queue_nums: int,
        on_change: Callable[[], None] | None = None,
        max_queue_nums: int = DEFAULT_MAX_QUEUE_NUMS,
        trace_topic: str | None = None,
    ) -> None:
        self._file: ConfigFile[TopicConfigSerializeWrapper] = ConfigFile(
            path,
            lambda text: TopicConfigSerializeWrapper.decode(text.encode()),
            lambda w: w.encode().decode(),
            ConfigError,
        )
        self.topics: dict[str, TopicConfig] = {}
        self.data_version = DataVersion(int(time.time() * 1000), 0)
        self.on_change = on_change
        self.version = 0  # bumped on every change; the persister writes topics.json when it moved
        self.max_queue_nums = max_queue_nums
        self._auto_create = auto_create
        self._system = [
            TopicConfig(SELF_TEST_TOPIC, 1, 1, READ_WRITE),
            TopicConfig(cluster_name, 16, 16, int(PermName.PERM_INHERIT)),
            TopicConfig(broker_name, 1, 1, int(PermName.PERM_INHERIT)),
            TopicConfig(OFFSET_MOVED_EVENT, 1, 1, READ_WRITE),
            TopicConfig(SCHEDULE_TOPIC, SCHEDULE_QUEUES, SCHEDULE_QUEUES, READ_WRITE),
        ]
        if trace_topic:  # traceTopicEnable: msgTraceTopicName, one queue, a system topic
            self._system.append(TopicConfig(trace_topic, 1, 1, READ_WRITE))
        if auto_create:
            self._system.append(
                TopicConfig(
                    AUTO_CREATE_TOPIC_KEY,
                    default_queue_nums,
                    default_queue_nums,
                    int(PermName.PERM_READ | PermName.PERM_WRITE | PermName.PERM_INHERIT),
                )
            )

    def load(self) -> None:
        """Read topics.json (or its .bak); system topics are (re)added."""
        wrapper = self._file.load()
        if wrapper is not None:
            self.topics = dict(wrapper.topic_config_table)
            self.data_version = wrapper.data_version
        for topic in self._system:
            self.topics.setdefault(topic.topic_name, topic)

    def persist(self) -> None:
        """Write topics.json now (blocking: call it from a worker thread)."""
        self.write(self.wrapper())

    def write(self, snapshot: TopicConfigSerializeWrapper) -> None:
        """Write a :meth:`wrapper` snapshot to topics.json (blocking: fsyncs)."""
        self._file.persist(snapshot)

    def is_system(self, topic: str) -> bool:
        """``TopicValidator.isSystemTopic``, plus this broker's cluster and broker name topics."""
        return (
            topic in SYSTEM_TOPICS
            or topic.startswith(SYSTEM_TOPIC_PREFIX)
            or any(t.topic_name == topic for t in self._system)
        )

    def wrapper(self) -> TopicConfigSerializeWrapper:
        return TopicConfigSerializeWrapper(dict(self.topics), self.data_version)

    def get(self, topic: str) -> TopicConfig | None:
        return self.topics.get(topic)

    def _changed(self) -> None:
        self.data_version = DataVersion(int(time.time() * 1000), self.data_version.counter + 1)
        self.version += 1
        if self.on_change is not None:
            self.on_change()

    def put(self, config: TopicConfig) -> TopicConfig:
        """Create or update a topic; raise InvalidTopicError / InvalidFieldError for bad settings."""
        check_topic_config(config, self.max_queue_nums)
        self.topics[config.topic_name] = config
        self._changed()
        return config

    def create_on_send(self, topic: str, requested_queues: int) -> TopicConfig | None:
        """``createTopicInSendMessageMethod``: auto-create from TBW102, or None when not allowed."""
        existing = self.topics.get(topic)
        if existing is not None:
            return existing
        template = self.topics.get(AUTO_CREATE_TOPIC_KEY)
        if not self._auto_create or template is None:
            return None
        queues = max(1, min(requested_queues, template.write_queue_nums, self.max_queue_nums))
        perm = template.perm & ~int(PermName.PERM_INHERIT)
        return self.put(TopicConfig(topic, queues, queues, perm))

    def create_system_topic(self, topic: str, queues: int) -> TopicConfig:
        """Retry/DLQ topics: created on demand whatever ``autoCreateTopicEnable`` says."""
        existing = self.topics.get(topic)
        if existing is not None:
            return existing
        return self.put(TopicConfig(topic, queues, queues, READ_WRITE))

    def adopt_stored(self, queue_ids: dict[str, list[int]]) -> list[str]:
        """A promoted replica: each topic its store holds ConsumeQueues for but its table lacks (created on
        the master after the last topic sync) is added readable and writable with the queues it holds;
        returns those topics. System topics are left to their owners."""
        adopted = []
        for topic, ids in queue_ids.items():
            if topic in self.topics or self.is_system(topic) or not ids:
                continue
            queues = min(max(ids) + 1, self.max_queue_nums)
            self.put(TopicConfig(topic, queues, queues, READ_WRITE))
            adopted.append(topic)
        return adopted

    def update_by_admin(self, config: TopicConfig, modification: str | None = None) -> TopicConfig:
        """UPDATE_AND_CREATE_TOPIC: like :meth:`put`, but system topics are refused; ``modification``
        (RocketMQ 5's ``+key=value,-key``) alters the topic's current attributes (InvalidFieldError if bad)."""
        check_topic(config.topic_name)
        if self.is_system(config.topic_name):
            raise InvalidFieldError(f"The topic[{config.topic_name}] is conflict with system topic.", field="topic")
        existing = self.topics.get(config.topic_name)
        current = existing.attribute_map if existing is not None else {}
        attributes = alter(existing is None, current, parse_modification(modification))
        return self.put(dataclasses.replace(config, attributes=tuple(sorted(attributes.items()))))

    def delete(self, topic: str) -> bool:
        """DELETE_TOPIC_IN_BROKER: forget ``topic``; system topics are refused, names are checked."""
        check_topic(topic)
        if self.is_system(topic):
            raise InvalidFieldError(f"The topic[{topic}] is conflict with system topic.", field="topic")
        if self.topics.pop(topic, None) is None:
            return False
        self._changed()
        return True


def check_sendable(topic: str) -> None:
    """Raise InvalidTopicError for names producers may never use (TopicNotWritableError: NO_PERMISSION)."""
    check_topic(topic)
    if topic in NOT_ALLOWED_SEND_TOPICS:
        raise TopicNotWritableError(f"sending message to topic [{topic}] is forbidden")
