"""asyncio transport for the remoting protocol: server, client and the connection both share."""

from sparkmq.remoting.client import RemotingClient, split_address
from sparkmq.remoting.connection import RemotingConnection
from sparkmq.remoting.limits import ServerLimits
from sparkmq.remoting.server import Processor, RemotingServer

__all__ = ["Processor", "RemotingClient", "RemotingConnection", "RemotingServer", "ServerLimits", "split_address"]
