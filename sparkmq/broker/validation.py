"""Names and topic settings from the wire, checked before the broker uses them.

Topic names follow RocketMQ's ``TopicValidator`` (``^[%|a-zA-Z0-9_-]+$``, at most 127
characters) on every path that names a topic, not only on sends: a topic becomes a directory
name under the store, so an unchecked one (``/etc``, ``..``) reaches outside it. Group names
use the same alphabet and stay short enough that ``%RETRY%<group>`` is a valid topic.
Failures raise the error tree's exceptions (code SYSTEM_ERROR), which the remoting layer
answers with their remark; remarks quote names with ``repr`` so a lone surrogate or a NUL
echoes as an escape, never as a string the frame encoder refuses.

>>> check_topic("TopicTest")
>>> check_topic("../etc")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
sparkmq.errors.InvalidTopicError: The specified topic['../etc'] contains illegal characters, allowing only ...
"""

from __future__ import annotations

import re

from sparkmq.errors import InvalidFieldError, InvalidTopicError
from sparkmq.message.names import RETRY_GROUP_TOPIC_PREFIX
from sparkmq.protocol import PermName
from sparkmq.protocol.namesrv_bodies import TopicConfig

VALID_NAME_PATTERN = "^[%|a-zA-Z0-9_-]+$"  # TopicValidator.VALID_PATTERN_STR
MAX_TOPIC_LENGTH = 127  # TopicValidator.TOPIC_MAX_LENGTH (the length byte of a v1 record)
MAX_GROUP_LENGTH = MAX_TOPIC_LENGTH - len(RETRY_GROUP_TOPIC_PREFIX)  # so that the group's retry topic is valid
TOPIC_FILTER_TYPES = frozenset({"SINGLE_TAG", "MULTI_TAG"})  # TopicFilterType
MAX_TOPIC_SYS_FLAG = 0b11  # TopicSysFlag: FLAG_UNIT | FLAG_UNIT_SUB
ALL_PERMS = int(PermName.PERM_PRIORITY | PermName.PERM_READ | PermName.PERM_WRITE | PermName.PERM_INHERIT)
_VALID_NAME = re.compile(r"[%|a-zA-Z0-9_-]+", re.ASCII)


def check_topic(topic: str) -> None:
    """Raise :class:`InvalidTopicError` unless ``topic`` is a valid RocketMQ topic name."""
    if not topic:
        raise InvalidTopicError("The specified topic is blank.")
    if not _VALID_NAME.fullmatch(topic):
        raise InvalidTopicError(
            f"The specified topic[{topic[: MAX_TOPIC_LENGTH + 1]!r}] contains illegal characters, "
            f"allowing only {VALID_NAME_PATTERN}"
        )
    if len(topic) > MAX_TOPIC_LENGTH:
        raise InvalidTopicError(f"The specified topic is longer than topic max length {MAX_TOPIC_LENGTH}.")


def check_group(group: str, field: str = "consumerGroup") -> None:
    """Raise :class:`InvalidFieldError` unless ``group`` is a valid consumer/producer group name."""
    if not group:
        raise InvalidFieldError("The specified group is blank.", field=field)
    if not _VALID_NAME.fullmatch(group):
        raise InvalidFieldError(
            f"The specified group[{group[: MAX_GROUP_LENGTH + 1]!r}] contains illegal characters, "
            f"allowing only {VALID_NAME_PATTERN}",
            field=field,
        )
    if len(group) > MAX_GROUP_LENGTH:
        raise InvalidFieldError(f"The specified group is longer than group max length {MAX_GROUP_LENGTH}.", field=field)


def check_topic_config(config: TopicConfig, max_queue_nums: int) -> None:
    """Raise :class:`InvalidFieldError` naming the first setting of ``config`` out of range."""
    check_topic(config.topic_name)
    for field, value in (("readQueueNums", config.read_queue_nums), ("writeQueueNums", config.write_queue_nums)):
        if not 1 <= value <= max_queue_nums:
            raise InvalidFieldError(
                f"{field} {value} of topic[{config.topic_name}] is outside 1..{max_queue_nums} (maxTopicQueueNums)",
                field=field,
            )
    if not 0 <= config.perm <= ALL_PERMS:
        raise InvalidFieldError(
            f"perm {config.perm} of topic[{config.topic_name}] is not a combination of PermName bits (0..{ALL_PERMS})",
            field="perm",
        )
    if config.topic_filter_type not in TOPIC_FILTER_TYPES:
        raise InvalidFieldError(
            f"topicFilterType {config.topic_filter_type!r} of topic[{config.topic_name}] is not "
            f"one of {', '.join(sorted(TOPIC_FILTER_TYPES))}",
            field="topicFilterType",
        )
    if not 0 <= config.topic_sys_flag <= MAX_TOPIC_SYS_FLAG:
        raise InvalidFieldError(
            f"topicSysFlag {config.topic_sys_flag} of topic[{config.topic_name}] is not a "
            f"combination of TopicSysFlag bits (0..{MAX_TOPIC_SYS_FLAG})",
            field="topicSysFlag",
        )
