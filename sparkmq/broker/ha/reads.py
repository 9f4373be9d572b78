"""Which broker a consumer should pull from next (``suggestWhichBrokerId``), as RocketMQ 4.x decides it.

``DefaultMessageStore.getMessage`` flags a read whose data lies further behind the CommitLog's end
than ``accessMessageInMemoryMaxRatio`` percent of the machine's RAM (no longer in the page cache);
``PullMessageProcessor`` then suggests ``whichBrokerWhenConsumeSlowly`` (1, a slave) when
``slaveReadEnable`` is on, the group's ``brokerId`` (0, the master) otherwise.

A slave without ``slaveReadEnable`` answers PULL_RETRY_IMMEDIATELY and suggests the master, as
Java does; unlike Java it keeps ``nextBeginOffset`` at the requested offset, so a client that
follows it does not skip the messages it was not given.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from sparkmq.broker.config import BrokerConfig
from sparkmq.message.names import MASTER_ID
from sparkmq.protocol import ResponseCode
from sparkmq.store import GetMessageStatus, GetResult

WHICH_BROKER_WHEN_CONSUME_SLOWLY = 1  # SubscriptionGroupConfig.whichBrokerWhenConsumeSlowly's default


def total_physical_memory() -> int:
    """``StoreUtil.TOTAL_PHYSICAL_MEMORY_SIZE``."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def data_out_of_memory(config: BrokerConfig, commitlog_max: int, result: GetResult) -> bool:
    """``suggestPullingFromSlave``: the last record read is over the in-memory window behind the log's end."""
    if result.status is not GetMessageStatus.FOUND or not len(result.physical_offsets):
        return False
    behind = commitlog_max - int(result.physical_offsets[-1])
    return behind > in_memory_bytes(config)


def in_memory_bytes(config: BrokerConfig) -> int:
    """How far behind the CommitLog's end a read may lie and still count as in memory."""
    return total_physical_memory() * config.access_message_in_memory_max_ratio // 100


@dataclass(frozen=True, slots=True)
class PullAdvice:
    """What a pull answers besides the records: its code, where to read next, and from which broker."""

    code: ResponseCode
    next_begin_offset: int
    suggest_which_broker_id: int


def advise(
    config: BrokerConfig, commitlog_max: int, result: GetResult, code: ResponseCode, requested_offset: int
) -> PullAdvice:
    """``PullMessageProcessor``'s role and ``slaveReadEnable`` rules applied to one read."""
    if config.is_slave and not config.slave_read_enable:
        if code is ResponseCode.SUCCESS:
            return PullAdvice(ResponseCode.PULL_RETRY_IMMEDIATELY, requested_offset, MASTER_ID)
        return PullAdvice(code, result.next_begin_offset, MASTER_ID)
    if not config.slave_read_enable:
        return PullAdvice(code, result.next_begin_offset, MASTER_ID)
    slow = data_out_of_memory(config, commitlog_max, result)
    return PullAdvice(code, result.next_begin_offset, WHICH_BROKER_WHEN_CONSUME_SLOWLY if slow else MASTER_ID)
