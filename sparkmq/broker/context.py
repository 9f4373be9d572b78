"""BrokerContext: the collaborators processors share, built by the controller."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from dataclasses import dataclass

from sparkmq.broker.clients import ClientManager
from sparkmq.broker.config import BrokerConfig
from sparkmq.broker.locks import RebalanceLockManager
from sparkmq.broker.long_polling import PullHoldService
from sparkmq.broker.persistence import TablePersister
from sparkmq.broker.subscriptions import SubscriptionGroupManager
from sparkmq.broker.topics import TopicConfigManager
from sparkmq.offsets import ConsumerOffsetTable
from sparkmq.protocol import RemotingCommand, RequestCode
from sparkmq.protocol.headers import NotifyConsumerIdsChangedRequestHeader
from sparkmq.message.record import MessageBatch
from sparkmq.store import MessageStore, PutMessageStatus, PutResult

logger = logging.getLogger(__name__)


@dataclass
class BrokerContext:
    """Everything a processor may touch; one per broker."""

    config: BrokerConfig
    store: MessageStore
    offsets: ConsumerOffsetTable
    topics: TopicConfigManager
    groups: SubscriptionGroupManager
    clients: ClientManager
    holds: PullHoldService
    locks: RebalanceLockManager
    persister: TablePersister

    async def put(self, batch: MessageBatch, wait_flush: bool = True) -> PutResult:
        """Store ``batch`` and, with SYNC flush, wait (without blocking the loop) for its fsync."""
        result, flushed = self.store.submit_messages(batch)
        if flushed is not None and wait_flush:
            try:
                await asyncio.wait_for(asyncio.wrap_future(flushed), self.config.sync_flush_timeout / 1000)
            except TimeoutError:
                return dataclasses.replace(result, status=PutMessageStatus.FLUSH_DISK_TIMEOUT)
        return result

    def notify_consumer_ids_changed(self, groups: list[str]) -> None:
        """Tell every member of ``groups`` to rebalance now (oneway NOTIFY_CONSUMER_IDS_CHANGED)."""
        if not self.config.notify_consumer_ids_changed_enable:
            return
        for group in groups:
            header = NotifyConsumerIdsChangedRequestHeader(group).to_fields()
            for connection in self.clients.consumer_connections(group):
                request = RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, connection.next_opaque(),
                                                  ext_fields=header, oneway=True)
                connection.send(request)
            logger.info("consumer group %s changed: %s", group, self.clients.consumer_ids(group))
