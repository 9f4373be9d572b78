"""NamesrvConfig: the NameServer's settings, parsed once at the edge (the command line)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from sparkmq.controller import ControllerConfig
from sparkmq.errors import ConfigError
from sparkmq.remoting import ServerLimits
from sparkmq.remoting.tls import ServerTls

#: RocketMQ's default NameServer port (Java ``NettyServerConfig.listenPort`` for the NameServer).
DEFAULT_PORT = 9876
#: Java schedules ``scanNotActiveBroker`` every 10 s.
DEFAULT_SCAN_INTERVAL_S = 10.0
#: ``BROKER_CHANNEL_EXPIRED_TIME``: 120 s, four missed 30 s registrations.
DEFAULT_BROKER_EXPIRED_S = 120.0


@dataclass(frozen=True, slots=True)
class NamesrvConfig:
    """Where the NameServer listens and how it expires silent brokers.

    ``port=0`` binds a free port (read ``NameServer.port`` after ``start()``). ``limits`` bounds
    what peers may cost; ``guard_registrations`` refuses a REGISTER_BROKER or UNREGISTER_BROKER
    that would take over or drop a broker registered from another live connection.

    Example::

        >>> NamesrvConfig("127.0.0.1", port=0, scan_interval_s=0.05, broker_expired_s=0.2).port
        0
        >>> NamesrvConfig(port=70000)
        Traceback (most recent call last):
        ...
        sparkmq.errors.ConfigError: port must be 0..65535, got 70000
    """

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    scan_interval_s: float = DEFAULT_SCAN_INTERVAL_S
    broker_expired_s: float = DEFAULT_BROKER_EXPIRED_S
    limits: ServerLimits = field(default_factory=ServerLimits, repr=False)
    guard_registrations: bool = field(default=True, repr=False)
    tls: ServerTls | None = field(default=None, repr=False)  # TLS in permissive or enforcing mode
    controller: ControllerConfig | None = field(default=None, repr=False)  # enableControllerInNamesrv

    def __post_init__(self) -> None:
        if not self.host:
            raise ConfigError("host must not be empty")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be 0..65535, got {self.port}")
        for name in ("scan_interval_s", "broker_expired_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"{name} must be a positive number of seconds, got {value}")

    @property
    def broker_expired_ms(self) -> int:
        """``broker_expired_s`` in the milliseconds the route tables count in."""
        return max(1, round(self.broker_expired_s * 1000))


__all__ = ["DEFAULT_BROKER_EXPIRED_S", "DEFAULT_PORT", "DEFAULT_SCAN_INTERVAL_S", "NamesrvConfig"]
