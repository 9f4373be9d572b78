"""The durable message store: CommitLog, ConsumeQueues, IndexFiles, checkpoint, recovery.

No network and no asyncio here; background flush and cleaning run on threads.
"""

from sparkmq.store.config import FlushDiskType, StoreConfig
from sparkmq.store.message_store import MessageStore
from sparkmq.store.recovery import RecoveryReport
from sparkmq.store.retention import RetentionReport
from sparkmq.store.status import GetMessageStatus, GetResult, PutMessageStatus, PutResult

__all__ = [
    "FlushDiskType",
    "GetMessageStatus",
    "GetResult",
    "MessageStore",
    "PutMessageStatus",
    "PutResult",
    "RecoveryReport",
    "RetentionReport",
    "StoreConfig",
]
