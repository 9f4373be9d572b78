"""ConsumeQueue files do not cost a descriptor each: idle ones are unmapped (CPython's mmap holds a
dup of the file's descriptor while mapped) and mapped again on use, with nothing lost or misread."""

from __future__ import annotations

import os
from pathlib import Path

from sparkmq.message import MessageBatch, encode_properties
from sparkmq.store import MessageStore
from support.store_data import tiny_config

QUEUES = 300


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def fill(store: MessageStore, rounds: int) -> None:
    for round_ in range(rounds):
        for q in range(QUEUES):
            body = f"t{q}-{round_}".encode()
            assert store.put_messages(MessageBatch(f"T{q}", 0, [body], [encode_properties({"n": str(round_)})])).ok


def bodies(store: MessageStore, q: int) -> list[bytes]:
    from sparkmq.message import iter_records

    result = store.get_messages("G", f"T{q}", 0, 0, 100)
    return [bytes(m.body) for m in iter_records(result.body())]


def test_thousands_of_queue_files_stay_within_the_mapping_cap(tmp_path: Path) -> None:
    before = open_descriptors()
    store = MessageStore(tiny_config(tmp_path / "store", max_mapped_consume_queue_files=16))
    store.start()
    try:
        fill(store, 3)
        assert open_descriptors() - before < 16 + 20  # the cap, plus CommitLog, index, checkpoint, lock
        store.flush()  # queue files unmapped while dirty are synced through a descriptor
        assert all(bodies(store, q) == [f"t{q}-{r}".encode() for r in range(3)] for q in range(QUEUES))
        assert open_descriptors() - before < 16 + 20
    finally:
        store.close()
    store = MessageStore(tiny_config(tmp_path / "store", max_mapped_consume_queue_files=16))
    store.start()
    try:
        assert all(bodies(store, q) == [f"t{q}-{r}".encode() for r in range(3)] for q in range(QUEUES))
    finally:
        store.close()


def test_without_a_cap_from_the_config_a_quarter_of_the_descriptor_limit_is_used(tmp_path: Path) -> None:
    import resource

    from sparkmq.store.config import MAX_MAPPED_CONSUME_QUEUE_FILES

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert tiny_config(tmp_path, max_mapped_consume_queue_files=None).mapped_consume_queue_files() == max(
        min(soft // 4, MAX_MAPPED_CONSUME_QUEUE_FILES), 8
    )
