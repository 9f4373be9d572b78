"""BrokerContext: the collaborators processors share, built by the controller."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sparkmq.broker.clients import ClientManager
from sparkmq.broker.config import BrokerConfig
from sparkmq.broker.locks import RebalanceLockManager
from sparkmq.broker.long_polling import PullHoldService
from sparkmq.broker.persistence import TablePersister
from sparkmq.broker.stats import BrokerStats
from sparkmq.broker.subscriptions import SubscriptionGroupManager
from sparkmq.broker.topics import TopicConfigManager
from sparkmq.message.record import MessageBatch
from sparkmq.offsets import ConsumerOffsetTable
from sparkmq.protocol import RemotingCommand, RequestCode
from sparkmq.protocol.headers import NotifyConsumerIdsChangedRequestHeader
from sparkmq.store import MessageStore, PutResult
from sparkmq.store.flush import flush_outcome

if TYPE_CHECKING:
    from sparkmq.broker.ha import HAService

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
    stats: BrokerStats = field(default_factory=BrokerStats)
    ha: HAService | None = None  # replication; None: a lone broker

    async def put(self, batch: MessageBatch, wait_flush: bool = True) -> PutResult:
        """Store ``batch``, then wait (``wait_flush``: the producer's WAIT) for what flush and replication promise."""
        result = await self._put_local(batch, wait_flush)
        return result if self.ha is None else await self.ha.confirm(result, wait_flush)

    async def _put_local(self, batch: MessageBatch, wait_flush: bool) -> PutResult:
        """Store ``batch`` and, with SYNC flush, wait (without blocking the loop) for its fsync.

        The wait never cancels the flush request: the group-commit thread still completes
        it, and the next put's fsync is not affected by this one timing out.
        """
        result, flushed = self.store.submit_messages(batch)
        if flushed is None or not wait_flush:
            return result
        waiter = asyncio.wrap_future(flushed)
        waiter.add_done_callback(_retrieve)
        done, _pending = await asyncio.wait({waiter}, timeout=self.config.sync_flush_timeout / 1000)
        if not done:
            return flush_outcome(result, TimeoutError())
        return flush_outcome(result, waiter.exception())

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


def _retrieve(future: asyncio.Future[int]) -> None:
    """Read a flush outcome nobody waits for any more, so asyncio does not report it as lost."""
    if not future.cancelled():
        future.exception()
