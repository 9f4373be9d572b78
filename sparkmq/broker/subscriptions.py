"""SubscriptionGroupManager: consumer group settings, persisted as config/subscriptionGroup.json.

Creating a group is cheap (a dict entry and a version bump): the broker's persister writes the
file off the event loop, batching many new groups into one write. Auto-creation stops at
``max_groups`` (``maxSubscriptionGroupNums``), so heartbeats and pulls naming ever new groups
cannot grow the table and the file without bound.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkmq.broker.validation import check_group
from sparkmq.config_file import ConfigFile
from sparkmq.errors import ConfigError

DEFAULT_RETRY_MAX_TIMES = 16  # SubscriptionGroupConfig.retryMaxTimes
DEFAULT_RETRY_QUEUE_NUMS = 1
DEFAULT_MAX_GROUPS = 10_000  # maxSubscriptionGroupNums


@dataclass(frozen=True, slots=True)
class SubscriptionGroupConfig:
    """The settings of one consumer group that sparkmq uses."""

    group_name: str
    consume_enable: bool = True
    retry_queue_nums: int = DEFAULT_RETRY_QUEUE_NUMS
    retry_max_times: int = DEFAULT_RETRY_MAX_TIMES
    consume_message_orderly: bool = False  # consumeMessageOrderly: a POP (5.x) group consumes FIFO

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerId": 0,
            "consumeBroadcastEnable": True,
            "consumeEnable": self.consume_enable,
            "consumeFromMinEnable": True,
            **({"consumeMessageOrderly": True} if self.consume_message_orderly else {}),  # RocketMQ 5 only
            "groupName": self.group_name,
            "notifyConsumerIdsChangedEnable": True,
            "retryMaxTimes": self.retry_max_times,
            "retryQueueNums": self.retry_queue_nums,
            "whichBrokerWhenConsumeSlowly": 1,
        }


def decode_table(text: str | bytes) -> dict[str, SubscriptionGroupConfig]:
    """A ``subscriptionGroup.json`` table (and GET_ALL_SUBSCRIPTIONGROUP_CONFIG's body) by group name."""
    table = json.loads(text).get("subscriptionGroupTable", {})
    return {
        name: SubscriptionGroupConfig(
            name,
            bool(v.get("consumeEnable", True)),
            int(v.get("retryQueueNums", DEFAULT_RETRY_QUEUE_NUMS)),
            int(v.get("retryMaxTimes", DEFAULT_RETRY_MAX_TIMES)),
            bool(v.get("consumeMessageOrderly", False)),
        )
        for name, v in table.items()
    }


def _encode(groups: dict[str, SubscriptionGroupConfig]) -> str:
    table = {name: groups[name].to_json() for name in sorted(groups)}
    return json.dumps({"subscriptionGroupTable": table}, indent="\t")


class SubscriptionGroupManager:
    """Groups by name; unknown groups are auto-created when ``auto_create`` is on."""

    def __init__(self, path: Path, auto_create: bool, max_groups: int = DEFAULT_MAX_GROUPS) -> None:
        self._file: ConfigFile[dict[str, SubscriptionGroupConfig]] = ConfigFile(
            path, decode_table, _encode, ConfigError
        )
        self._auto_create = auto_create
        self.max_groups = max_groups
        self.groups: dict[str, SubscriptionGroupConfig] = {}
        self.version = 0  # bumped on every change; the persister writes the file when it moved

    def load(self) -> None:
        self.groups = self._file.load() or {}

    def snapshot(self) -> dict[str, SubscriptionGroupConfig]:
        """A copy of the table to write from another thread."""
        return dict(self.groups)

    def write(self, snapshot: dict[str, SubscriptionGroupConfig]) -> None:
        """Write a :meth:`snapshot` to subscriptionGroup.json (blocking: fsyncs)."""
        self._file.persist(snapshot)

    def find_or_create(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's settings, auto-creating it when allowed; None when it does not exist and cannot be created.

        Raises InvalidFieldError for a malformed group name.
        """
        config = self.groups.get(group)
        if config is None:
            check_group(group)
            if self._auto_create and len(self.groups) < self.max_groups:
                config = self.groups[group] = SubscriptionGroupConfig(group)
                self.version += 1
        return config

    def update(self, config: SubscriptionGroupConfig) -> None:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: create or replace a group's settings (no count limit:
        an admin asked)."""
        check_group(config.group_name)
        self.groups[config.group_name] = config
        self.version += 1

    def delete(self, group: str) -> bool:
        """DELETE_SUBSCRIPTIONGROUP: forget a group; False when it was not there."""
        check_group(group)
        if self.groups.pop(group, None) is None:
            return False
        self.version += 1
        return True

    def refusal(self, group: str) -> str:
        """The remark for a group that :meth:`find_or_create` did not create."""
        if not self._auto_create:
            return f"subscription group [{group}] does not exist (autoCreateSubscriptionGroup=false)"
        return (
            f"subscription group [{group}] does not exist and the broker already holds {len(self.groups)} groups "
            f"(maxSubscriptionGroupNums={self.max_groups})"
        )
