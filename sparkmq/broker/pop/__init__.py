"""POP consumption (RocketMQ 5): invisible messages, checkpoints, acks and revive to retry/DLQ.

``PopService`` (``service.py``) is the core the gRPC endpoint and the POP_MESSAGE family of
remoting requests call; ``journal.py`` keeps its checkpoints durable; ``handle.py`` is the
receipt handle (``ExtraInfoUtil``'s shape); ``attempts.py`` the recent answers by the client's attempt id;
``revive_log.py`` carries the changes to the replicas (controller mode).
"""

from sparkmq.broker.pop.handle import ReceiptHandle
from sparkmq.broker.pop.select import PopRequest
from sparkmq.broker.pop.service import Popped, PopService

__all__ = ["PopRequest", "PopService", "Popped", "ReceiptHandle"]
