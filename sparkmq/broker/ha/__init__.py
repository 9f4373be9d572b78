"""Master/slave replication of RocketMQ 4.x (HAService), the slave's table sync (SlaveSynchronize)."""

from sparkmq.broker.ha.service import HAService
from sparkmq.broker.ha.sync import SlaveSynchronize, TableSyncProcessors

__all__ = ["HAService", "SlaveSynchronize", "TableSyncProcessors"]
