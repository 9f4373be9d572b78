"""RocketMQ 5's controller: broker-group metadata, heartbeats and master election (automatic failover)."""

from sparkmq.controller.config import ControllerConfig
from sparkmq.controller.manager import ControllerManager
from sparkmq.controller.server import ControllerServer

__all__ = ["ControllerConfig", "ControllerManager", "ControllerServer"]
