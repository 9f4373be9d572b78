"""Transactional messages: half messages, END_TRANSACTION and the check-back, stored as RocketMQ stores them.

:class:`TransactionService` bundles the three for the controller: ``end_transaction`` is the
END_TRANSACTION processor, ``start()`` rebuilds the state from the store and starts the
check-back loop, ``stop()`` ends it on a master the controller demoted (``start()`` runs it again
on a newly elected one), ``close()`` stops it before the store closes.
"""

from __future__ import annotations

import asyncio
import logging

from sparkmq.broker.context import BrokerContext
from sparkmq.broker.transactions.check import TransactionCheckService
from sparkmq.broker.transactions.end import EndTransactionProcessor
from sparkmq.broker.transactions.prepare import prepare_half
from sparkmq.broker.transactions.state import TransactionState, is_prepared
from sparkmq.errors import ConfigError
from sparkmq.remoting.periodic import run_every, stop_tasks

logger = logging.getLogger(__name__)

__all__ = [
    "EndTransactionProcessor",
    "TransactionCheckService",
    "TransactionService",
    "TransactionState",
    "is_prepared",
    "prepare_half",
]


class TransactionService:
    """The transaction state, its END processor and its check-back loop for one broker."""

    def __init__(self, context: BrokerContext) -> None:
        if context.config.transaction_check_interval <= 0:
            raise ConfigError(
                f"transactionCheckInterval {context.config.transaction_check_interval} must be positive (ms)"
            )
        self.state = TransactionState(context.store)
        self.end_transaction = EndTransactionProcessor(context, self.state)
        self.checker = TransactionCheckService(context, self.state)
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None

    async def start(self) -> None:
        """Load the ended transactions and start checking back (again, after :meth:`stop`)."""
        if self._task is not None:
            return
        self.checker.resume()
        ended = await asyncio.to_thread(self.state.load)
        logger.info("transactions: check-back started, %d ended transactions known from the op queue", ended)
        interval_s = self.checker.ctx.config.transaction_check_interval / 1000
        self._task = asyncio.get_running_loop().create_task(
            run_every(interval_s, self.checker.check_once, "transaction check-back"), name="sparkmq-transaction-check"
        )

    async def stop(self) -> None:
        """Stop checking back: this broker is no master any more (Java's ``shutdownProcessorByHa``)."""
        if self._task is not None:
            await self.close()
            logger.warning("transactions: check-back stopped: this broker is no master")

    async def close(self) -> None:
        if self._task is not None:
            await stop_tasks([self._task], "transaction check-back")
            self._task = None
        await self.checker.close()
