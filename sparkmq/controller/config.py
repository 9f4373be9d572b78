"""ControllerConfig: a controller node's settings (RocketMQ 5's ``ControllerConfig`` keys)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sparkmq.errors import ConfigError

#: ``scanNotActiveBrokerInterval``: how often silent brokers are looked for.
DEFAULT_SCAN_NOT_ACTIVE_BROKER_INTERVAL_MS = 5000
#: A heartbeat without ``heartbeatTimeoutMills`` counts for ``controllerHeartBeatTimeoutMills``'s default.
DEFAULT_HEARTBEAT_TIMEOUT_MS = 10_000


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """``controllerStorePath`` holds controller.json; ``enableElectUncleanMaster`` lets a replica
    outside the SyncStateSet become master (and lose what only the SyncStateSet held).

    Example::

        >>> ControllerConfig(Path("controller"), scan_not_active_broker_interval=0)
        Traceback (most recent call last):
        ...
        sparkmq.errors.ConfigError: scanNotActiveBrokerInterval must be positive, got 0
    """

    store_path: Path
    scan_not_active_broker_interval: int = DEFAULT_SCAN_NOT_ACTIVE_BROKER_INTERVAL_MS
    enable_elect_unclean_master: bool = False
    default_heartbeat_timeout_ms: int = DEFAULT_HEARTBEAT_TIMEOUT_MS
    group: str = "group_controller"

    def __post_init__(self) -> None:
        if self.scan_not_active_broker_interval <= 0:
            raise ConfigError(
                f"scanNotActiveBrokerInterval must be positive, got {self.scan_not_active_broker_interval}"
            )
