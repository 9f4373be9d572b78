"""What a pull answers besides its records, as RocketMQ 4.x's ``PullMessageProcessor`` decides it.

``DefaultMessageStore.getMessage`` flags a read whose data lies further behind the CommitLog's end
than ``accessMessageInMemoryMaxRatio`` percent of the machine's RAM (no longer in the page cache);
the pull then suggests ``whichBrokerWhenConsumeSlowly`` (1, a slave) when ``slaveReadEnable`` is
on, the group's ``brokerId`` (0, the master) otherwise, and always the master without it.

A slave serves reads whatever ``slaveReadEnable`` says: Java's role check sets
PULL_RETRY_IMMEDIATELY, but the status switch that follows overrides it (FOUND is SUCCESS), so the
flag only decides which broker the answer suggests. A slave never moves a consumer's offset
(``offsetCheckInSlave`` is off): the store's correction keeps the requested offset, and an answer
that would be PULL_OFFSET_MOVED is PULL_RETRY_IMMEDIATELY suggesting the group's broker.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from sparkmq.broker.config import BrokerConfig
from sparkmq.message.names import MASTER_ID
from sparkmq.protocol import ResponseCode
from sparkmq.store import GetMessageStatus, GetResult

WHICH_BROKER_WHEN_CONSUME_SLOWLY = 1  # SubscriptionGroupConfig.whichBrokerWhenConsumeSlowly's default
GROUP_BROKER_ID = MASTER_ID  # SubscriptionGroupConfig.brokerId's default
# The reads whose nextBeginOffset the store corrects (DefaultMessageStore.nextOffsetCorrection): a
# slave keeps the requested offset instead.
_CORRECTED = frozenset(
    {
        GetMessageStatus.NO_MATCHED_LOGIC_QUEUE,
        GetMessageStatus.NO_MESSAGE_IN_QUEUE,
        GetMessageStatus.OFFSET_TOO_SMALL,
        GetMessageStatus.OFFSET_OVERFLOW_ONE,
        GetMessageStatus.OFFSET_OVERFLOW_BADLY,
        GetMessageStatus.OFFSET_FOUND_NULL,
    }
)


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
    """``PullMessageProcessor``'s role and ``slaveReadEnable`` rules applied to one read whose status
    maps to ``code``."""
    suggest = MASTER_ID
    if config.slave_read_enable:
        slow = data_out_of_memory(config, commitlog_max, result)
        suggest = WHICH_BROKER_WHEN_CONSUME_SLOWLY if slow else GROUP_BROKER_ID
    if not config.is_slave:
        return PullAdvice(code, result.next_begin_offset, suggest)
    next_begin = requested_offset if result.status in _CORRECTED else result.next_begin_offset
    if code is ResponseCode.PULL_OFFSET_MOVED:
        return PullAdvice(ResponseCode.PULL_RETRY_IMMEDIATELY, next_begin, GROUP_BROKER_ID)
    return PullAdvice(code, next_begin, suggest)
