"""StoreConfig: the message store's settings, with RocketMQ's broker.conf names in comments."""

from __future__ import annotations

import enum
import resource
from dataclasses import dataclass, field
from pathlib import Path

from sparkmq.errors import ConfigError
from sparkmq.message.layout import DEFAULT_MAX_MESSAGE_BYTES
from sparkmq.message.record import Host

COMMITLOG_FILE_BYTES = 1024 * 1024 * 1024  # mapedFileSizeCommitLog
CONSUME_QUEUE_UNITS_PER_FILE = 300_000  # mapedFileSizeConsumeQueue / 20
MAX_MAPPED_CONSUME_QUEUE_FILES = 4096  # a cap on the mappings (descriptors) ConsumeQueues may hold
INDEX_HASH_SLOTS = 5_000_000  # maxHashSlotNum
INDEX_ENTRIES = 20_000_000  # maxIndexNum
DEFAULT_MESSAGE_DELAY_LEVEL = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"  # messageDelayLevel
DEFAULT_MAX_TRANSFER_BYTES = 4 * 1024 * 1024  # maxTransferBytesOnMessageInMemory: one read's body at most
_UNIT_MILLIS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def delay_level_millis(levels: str) -> list[int]:
    """Milliseconds of each delay level (level n is item n-1).

    >>> delay_level_millis("1s 5m 2h")
    [1000, 300000, 7200000]
    """
    try:
        return [int(token[:-1]) * _UNIT_MILLIS[token[-1]] for token in levels.split()]
    except (KeyError, ValueError, IndexError) as exc:
        raise ConfigError(f"messageDelayLevel {levels!r} is not like '1s 5s 1m 2h'") from exc


class FlushDiskType(enum.Enum):
    """flushDiskType: acknowledge after the page cache (ASYNC) or after an fsync (SYNC)."""

    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


@dataclass(frozen=True)
class StoreConfig:
    """Everything the store needs; built once by a composition root.

    >>> StoreConfig(Path("store")).commitlog_dir
    PosixPath('store/commitlog')
    """

    root_dir: Path  # storePathRootDir
    commitlog_dir_override: Path | None = None  # storePathCommitLog
    commitlog_file_bytes: int = COMMITLOG_FILE_BYTES
    consume_queue_units_per_file: int = CONSUME_QUEUE_UNITS_PER_FILE
    # ConsumeQueue files mapped at once; each mapping holds a descriptor (not a RocketMQ key).
    # None: a quarter of the process's descriptor limit, at most MAX_MAPPED_CONSUME_QUEUE_FILES.
    max_mapped_consume_queue_files: int | None = None
    index_hash_slots: int = INDEX_HASH_SLOTS
    index_entries: int = INDEX_ENTRIES
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES  # maxMessageSize
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    flush_interval_commitlog_ms: int = 500  # flushIntervalCommitLog
    flush_commitlog_least_pages: int = 4  # flushCommitLogLeastPages
    flush_commitlog_thorough_interval_ms: int = 10_000
    # TransientStorePool (ASYNC_FLUSH only): appends go to pooled buffers, committed to the files
    # every commit interval (when enough pages wait, or everything at a thorough commit).
    transient_store_pool_enable: bool = False  # transientStorePoolEnable
    transient_store_pool_size: int = 5  # transientStorePoolSize: buffers of commitlog_file_bytes each
    commit_interval_commitlog_ms: int = 200  # commitIntervalCommitLog
    commit_commitlog_least_pages: int = 4  # commitCommitLogLeastPages
    commit_commitlog_thorough_interval_ms: int = 200  # commitCommitLogThoroughInterval
    flush_interval_consume_queue_ms: int = 1000  # flushIntervalConsumeQueue
    flush_consume_queue_least_pages: int = 2  # flushConsumeQueueLeastPages
    flush_consume_queue_thorough_interval_ms: int = 60_000  # flushConsumeQueueThoroughInterval
    sync_flush_timeout_ms: int = 5000  # syncFlushTimeout
    file_reserved_time_hours: float = 72  # fileReservedTime
    delete_when: str = "04"  # deleteWhen: hours separated by ';'
    disk_max_used_space_ratio: float = 0.75  # diskMaxUsedSpaceRatio: above it, delete expired files at once
    disk_space_clean_forcibly_ratio: float = 0.85  # diskSpaceCleanForciblyRatio: above it, unexpired too
    disk_space_warning_level_ratio: float = 0.90  # diskSpaceWarningLevelRatio: above it, refuse writes
    clean_file_forcibly_enable: bool = True  # cleanFileForciblyEnable
    clean_resource_interval_ms: int = 10_000  # cleanResourceInterval
    check_crc_on_recover: bool = True  # checkCRCOnRecover; also the body CRC check of older records (body_verify)
    verify_bytes_per_second: int = 16 * 1024 * 1024  # that check's background walk (0: reads check instead)
    message_delay_level: str = DEFAULT_MESSAGE_DELAY_LEVEL  # messageDelayLevel
    store_host: Host = field(default_factory=lambda: Host(b"\x7f\x00\x00\x01", 10911))

    def __post_init__(self) -> None:
        if self.transient_store_pool_enable and self.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            raise ConfigError(
                "transientStorePoolEnable=true needs flushDiskType=ASYNC_FLUSH: a SYNC_FLUSH put is acknowledged "
                "after its fsync, which the pool's commit interval would delay"
            )

    @property
    def commitlog_dir(self) -> Path:
        return self.commitlog_dir_override or self.root_dir / "commitlog"

    @property
    def consume_queue_dir(self) -> Path:
        return self.root_dir / "consumequeue"

    @property
    def index_dir(self) -> Path:
        return self.root_dir / "index"

    @property
    def checkpoint_path(self) -> Path:
        return self.root_dir / "checkpoint"

    @property
    def abort_path(self) -> Path:
        return self.root_dir / "abort"

    @property
    def lock_path(self) -> Path:
        return self.root_dir / "lock"

    def mapped_consume_queue_files(self) -> int:
        """``max_mapped_consume_queue_files``, or a quarter of the descriptor limit (sockets need the rest)."""
        if self.max_mapped_consume_queue_files is not None:
            return self.max_mapped_consume_queue_files
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        limit = soft if soft != resource.RLIM_INFINITY else MAX_MAPPED_CONSUME_QUEUE_FILES * 4
        return max(min(limit // 4, MAX_MAPPED_CONSUME_QUEUE_FILES), 8)

    def delete_hours(self) -> frozenset[int]:
        """The hours of day named by ``deleteWhen`` (e.g. ``"04;16"``)."""
        return frozenset(int(part) for part in self.delete_when.split(";") if part.strip())
