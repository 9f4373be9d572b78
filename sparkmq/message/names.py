"""RocketMQ's reserved names and ids, shared by every layer (``MixAll`` and ``TopicValidator`` in Java).

Topics the broker keeps for itself, the per-group retry and dead-letter topics, and the broker id
of a master. The store, the broker, the clients and the Spark connector all import them from here.

>>> retry_topic("CID_orders"), dlq_topic("CID_orders")
('%RETRY%CID_orders', '%DLQ%CID_orders')
>>> [is_system_topic(t) for t in ("TBW102", "%RETRY%CID_orders", "rmq_sys_x", "orders")]
[True, True, True, False]
"""

from __future__ import annotations

AUTO_CREATE_TOPIC_KEY = "TBW102"  # MixAll.AUTO_CREATE_TOPIC_KEY_TOPIC: the template of auto-created topics
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"  # delayed messages wait here, queue ``level - 1``
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
BENCHMARK_TOPIC = "BenchmarkTest"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"

#: TopicValidator.SYSTEM_TOPIC_SET: no admin may create, update or delete these.
SYSTEM_TOPICS = frozenset(
    {
        AUTO_CREATE_TOPIC_KEY,
        SCHEDULE_TOPIC,
        BENCHMARK_TOPIC,
        TRANS_HALF_TOPIC,
        TRACE_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)
#: Producers may not send to these (TopicValidator.isNotAllowedSendTopic): NO_PERMISSION.
NOT_ALLOWED_SEND_TOPICS = frozenset(
    {
        SCHEDULE_TOPIC,
        TRANS_HALF_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)

#: MixAll.MASTER_ID: broker id 0 is a group's master; clients publish only to it.
MASTER_ID = 0


def retry_topic(group: str) -> str:
    """The topic a consumer group's failed messages are retried from."""
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    """The dead-letter topic of a consumer group."""
    return DLQ_GROUP_TOPIC_PREFIX + group


def is_retry_topic(topic: str) -> bool:
    """Whether ``topic`` is some group's retry topic."""
    return topic.startswith(RETRY_GROUP_TOPIC_PREFIX)


def is_system_topic(topic: str) -> bool:
    """A broker's own topic, a group's retry or dead-letter topic, or an ``rmq_sys_`` topic."""
    return topic in SYSTEM_TOPICS or topic.startswith(
        (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX, SYSTEM_TOPIC_PREFIX)
    )
