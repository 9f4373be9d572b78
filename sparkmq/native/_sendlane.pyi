"""Types of the C extension sparkmq.native._sendlane (sendlane.c)."""

import mmap

class SendGroup:
    """Plain sends scanned from a read buffer, their CommitLog records encoded."""

    @property
    def count(self) -> int: ...
    @property
    def rows(self) -> int: ...
    @property
    def code(self) -> int: ...
    @property
    def end(self) -> int: ...
    @property
    def record_bytes(self) -> int: ...
    @property
    def index_count(self) -> int: ...
    @property
    def topics(self) -> list[str]: ...
    @property
    def keys(self) -> list[tuple[str, int]]: ...
    @property
    def key_counts(self) -> list[int]: ...
    @property
    def topic_stats(self) -> list[tuple[str, int, int]]: ...
    @property
    def topic_max_queue(self) -> list[int]: ...
    @property
    def waits(self) -> bool: ...
    def answers(self) -> list[tuple[int, list[int], int, int, bool]]: ...
    def place(self, physical_start: int, store_timestamp: int, bases: list[int]) -> bytes: ...
    def queue_units(self) -> list[tuple[bytes, int]]: ...
    def index_entries(self) -> tuple[list[int], list[int]]: ...
    def index_into(
        self,
        mapping: mmap.mmap,
        slots: int,
        index_count: int,
        begin_timestamp: int,
        begin_phy_offset: int | None,
        hash_slot_count: int,
        store_timestamp: int,
    ) -> tuple[int, int, int, int] | None: ...
    def responses(
        self,
        parts: tuple[bytes, bytes, bytes, bytes, bytes],
        store_ip: bytes,
        store_port: int,
        first: int = 0,
        stop: int = -1,
    ) -> bytes: ...
    def first_refused(self, limits: list[int]) -> int: ...

def scan(
    buffer: bytes | bytearray | memoryview,
    start: int,
    limit: int,
    max_frame_bytes: int,
    max_message_bytes: int,
    born_ip: bytes,
    born_port: int,
    store_ip: bytes,
    store_port: int,
) -> SendGroup | None: ...
def merge(groups: list[SendGroup]) -> SendGroup | None: ...

#: (frame end, opaque, consumerGroup, topic, queueId, queueOffset, maxMsgNums, sysFlag, commitOffset,
#: suspendTimeoutMillis, subVersion, subscription, expressionType)
PullItem = tuple[int, int, str, str, int, int, int, int, int, int, int, str | None, str | None]

def scan_pulls(
    buffer: bytes | bytearray | memoryview, start: int, limit: int, max_frame_bytes: int
) -> list[PullItem]: ...
