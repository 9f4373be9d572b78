"""SubscriptionGroupManager: consumer group settings, persisted as config/subscriptionGroup.json."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkmq.config_file import ConfigFile
from sparkmq.errors import ConfigError

DEFAULT_RETRY_MAX_TIMES = 16  # SubscriptionGroupConfig.retryMaxTimes
DEFAULT_RETRY_QUEUE_NUMS = 1


@dataclass(frozen=True, slots=True)
class SubscriptionGroupConfig:
    """The settings of one consumer group that sparkmq uses."""

    group_name: str
    consume_enable: bool = True
    retry_queue_nums: int = DEFAULT_RETRY_QUEUE_NUMS
    retry_max_times: int = DEFAULT_RETRY_MAX_TIMES

    def to_json(self) -> dict[str, Any]:
        return {"brokerId": 0, "consumeBroadcastEnable": True, "consumeEnable": self.consume_enable,
                "consumeFromMinEnable": True, "groupName": self.group_name, "notifyConsumerIdsChangedEnable": True,
                "retryMaxTimes": self.retry_max_times, "retryQueueNums": self.retry_queue_nums,
                "whichBrokerWhenConsumeSlowly": 1}


def _decode(text: str) -> dict[str, SubscriptionGroupConfig]:
    table = json.loads(text).get("subscriptionGroupTable", {})
    return {name: SubscriptionGroupConfig(name, bool(v.get("consumeEnable", True)),
                                          int(v.get("retryQueueNums", DEFAULT_RETRY_QUEUE_NUMS)),
                                          int(v.get("retryMaxTimes", DEFAULT_RETRY_MAX_TIMES)))
            for name, v in table.items()}


def _encode(groups: dict[str, SubscriptionGroupConfig]) -> str:
    table = {name: groups[name].to_json() for name in sorted(groups)}
    return json.dumps({"subscriptionGroupTable": table}, indent="\t")


class SubscriptionGroupManager:
    """Groups by name; unknown groups are auto-created when ``auto_create`` is on."""

    def __init__(self, path: Path, auto_create: bool) -> None:
        self._file: ConfigFile[dict[str, SubscriptionGroupConfig]] = ConfigFile(path, _decode, _encode, ConfigError)
        self._auto_create = auto_create
        self.groups: dict[str, SubscriptionGroupConfig] = {}

    def load(self) -> None:
        self.groups = self._file.load() or {}

    def persist(self) -> None:
        self._file.persist(self.groups)

    def find_or_create(self, group: str) -> SubscriptionGroupConfig | None:
        config = self.groups.get(group)
        if config is None and self._auto_create:
            config = self.groups[group] = SubscriptionGroupConfig(group)
            self.persist()
        return config
