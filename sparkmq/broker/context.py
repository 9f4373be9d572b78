"""BrokerContext: the collaborators processors share, built by the controller."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Awaitable
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
    from sparkmq.tables.materializer import Materializer

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
    tables: Materializer | None = None  # the table writer (tableTopicRoot set); docs/tables.md

    async def put(self, batch: MessageBatch, wait_flush: bool = True) -> PutResult:
        """Store ``batch`` and, with SYNC flush, wait (without blocking the loop) for its fsync."""
        results, durable = self.put_group([batch], [wait_flush])
        return (results if durable is None else await durable)[0]

    def put_group(
        self, batches: list[MessageBatch], wait_flush: list[bool]
    ) -> tuple[list[PutResult], Awaitable[list[PutResult]] | None]:
        """Store ``batches`` in order (one group put) and say when they are durable.

        The one place where sends are appended and their durability awaited. Returns the
        results now, and None when nobody waits (ASYNC flush, or no batch asked for its flush
        by ``WAIT=true``), else an awaitable of the final results: one wait, up to
        ``syncFlushTimeout``, for the group's flush, turning each waiting result into what the
        flush gave it (FLUSH_DISK_TIMEOUT, SERVICE_NOT_AVAILABLE), then, on a SYNC_MASTER, the
        wait for a slave to hold the bytes (FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE).
        """
        refusal = None if self.ha is None else self.ha.in_sync_refusal()
        if refusal is not None:  # nothing stored: the SyncStateSet could not hold it as promised
            return [refusal] * len(batches), None
        results, flushed = self.store.submit_group(batches)
        if not any(wait and result.ok for wait, result in zip(wait_flush, results, strict=True)):
            return results, None
        replicated = self.ha is not None and self.ha.sync_master
        if flushed is None and not replicated:
            return results, None
        return results, self._durable(results, wait_flush, flushed)

    async def _durable(
        self, results: list[PutResult], wait_flush: list[bool], flushed: concurrent.futures.Future[int] | None
    ) -> list[PutResult]:
        """The results once flush (SYNC_FLUSH) and replication (SYNC_MASTER) are what they promise."""
        if flushed is not None:
            results = await self.flushed(results, wait_flush, flushed)
        ha = self.ha
        if ha is None:
            return results
        return await ha.confirm(results, wait_flush)

    async def flushed(
        self, results: list[PutResult], wait_flush: list[bool], flushed: concurrent.futures.Future[int]
    ) -> list[PutResult]:
        """``results`` once ``flushed`` is done, each waiting one turned into what the flush gave it
        (``flush_outcome``; up to ``syncFlushTimeout``). The wait never cancels the flush request:
        the group-commit thread still completes it, and the next put's fsync is not affected by
        this one timing out."""
        waiter = asyncio.wrap_future(flushed)
        waiter.add_done_callback(_retrieve)
        done, _pending = await asyncio.wait({waiter}, timeout=self.config.sync_flush_timeout / 1000)
        error = waiter.exception() if done else TimeoutError()
        return [
            flush_outcome(result, error) if wait and result.ok else result
            for wait, result in zip(wait_flush, results, strict=True)
        ]

    def notify_consumer_ids_changed(self, groups: list[str]) -> None:
        """Tell every member of ``groups`` to rebalance now (oneway NOTIFY_CONSUMER_IDS_CHANGED)."""
        if not self.config.notify_consumer_ids_changed_enable:
            return
        for group in groups:
            header = NotifyConsumerIdsChangedRequestHeader(group).to_fields()
            for connection in self.clients.consumer_connections(group):
                request = RemotingCommand.request(
                    RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, connection.next_opaque(), ext_fields=header, oneway=True
                )
                connection.send(request)
            logger.info("consumer group %s changed: %s", group, self.clients.consumer_ids(group))


def _retrieve(future: asyncio.Future[int]) -> None:
    """Read a flush outcome nobody waits for any more, so asyncio does not report it as lost."""
    if not future.cancelled():
        future.exception()
