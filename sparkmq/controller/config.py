"""ControllerConfig: a controller node's settings (RocketMQ 5's ``ControllerConfig`` keys)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sparkmq.errors import ConfigError

#: ``scanNotActiveBrokerInterval``: how often silent brokers are looked for.
DEFAULT_SCAN_NOT_ACTIVE_BROKER_INTERVAL_MS = 5000
#: A heartbeat without ``heartbeatTimeoutMills`` counts for ``controllerHeartBeatTimeoutMills``'s default.
DEFAULT_HEARTBEAT_TIMEOUT_MS = 10_000


def parse_peers(text: str) -> tuple[tuple[str, str], ...]:
    """``controllerDLegerPeers``: ``n0-host:port;n1-host:port;...`` as ``(id, address)`` pairs.

    >>> parse_peers("n0-127.0.0.1:9877;n1-127.0.0.1:9878")
    (('n0', '127.0.0.1:9877'), ('n1', '127.0.0.1:9878'))
    >>> parse_peers("n0:9877")
    Traceback (most recent call last):
    ...
    sparkmq.errors.ConfigError: controllerDLegerPeers entry 'n0:9877' is not id-host:port
    """
    peers: list[tuple[str, str]] = []
    for entry in filter(None, (e.strip() for e in text.split(";"))):
        node_id, _, address = entry.partition("-")
        host, _, port = address.rpartition(":")
        if not node_id or not host or not port.isdigit():
            raise ConfigError(f"controllerDLegerPeers entry {entry!r} is not id-host:port")
        peers.append((node_id, address))
    if len({p[0] for p in peers}) != len(peers):
        raise ConfigError(f"controllerDLegerPeers {text!r} names a node twice")
    return tuple(peers)


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """``controllerStorePath`` holds controller.json (one node) or the Raft journal (several);
    ``enableElectUncleanMaster`` lets a replica outside the SyncStateSet become master (and lose
    what only the SyncStateSet held). ``peers`` (``controllerDLegerPeers``) with more than one
    node replicates the tables through Raft among them; ``self_id`` (``controllerDLegerSelfId``)
    names this node.

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
    peers: tuple[tuple[str, str], ...] = ()
    self_id: str = "n0"

    def __post_init__(self) -> None:
        if self.scan_not_active_broker_interval <= 0:
            raise ConfigError(
                f"scanNotActiveBrokerInterval must be positive, got {self.scan_not_active_broker_interval}"
            )
        if self.peers and self.self_id not in dict(self.peers):
            raise ConfigError(f"controllerDLegerSelfId {self.self_id!r} is not in controllerDLegerPeers")

    @property
    def replicated(self) -> bool:
        """Several nodes: the tables go through Raft."""
        return len(self.peers) > 1
