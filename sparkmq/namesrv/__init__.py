"""The NameServer: route tables, request processors and the server that composes them.

Example::

    >>> from sparkmq.namesrv import NameServer, NamesrvConfig
    >>> NameServer(NamesrvConfig("127.0.0.1", port=0)).config.broker_expired_s
    120.0
"""

from sparkmq.namesrv.config import NamesrvConfig
from sparkmq.namesrv.processors import NamesrvProcessors
from sparkmq.namesrv.routes import BrokerLiveInfo, RegisterBrokerResult, RouteInfoManager
from sparkmq.namesrv.server import NameServer

__all__ = [
    "BrokerLiveInfo",
    "NameServer",
    "NamesrvConfig",
    "NamesrvProcessors",
    "RegisterBrokerResult",
    "RouteInfoManager",
]
