"""Damaged IndexFile slots, entries and headers: never followed out of bounds, reported, and the index
rebuilt from the CommitLog, so a query by key still finds every message."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkmq.store import MessageStore
from sparkmq.store.index_file import ENTRY_BYTES, HEADER_BYTES, SLOT_BYTES, index_key_hashes
from support.store_damage import damage_bytes
from support.store_data import make_batch, tiny_config

COUNT = 300  # two keys a message, 200 entries a file: four files
PROBES = ("key5", "key150", "key299", "U0000000007")


def _filled(root: Path) -> MessageStore:
    store = MessageStore(tiny_config(root))
    store.start()
    for start in range(0, COUNT, 30):
        assert store.put_messages(make_batch("T", 0, 30, start=start)).ok
    return store


def _answers(store: MessageStore) -> dict[str, list[int]]:
    return {key: [m.queue_offset for m in store.query_messages("T", key, 5)] for key in PROBES}


def _entry_of(store: MessageStore, key: str) -> tuple[Path, int, int]:
    """The file, entry position and slot position of ``key``'s entry."""
    (message,) = store.query_messages("T", key, 5)
    key_hash = int(index_key_hashes([f"T#{key}"])[0])
    for index in store.index.files:
        for number in range(1, index.index_count):
            entry = index._entries[number]
            if int(entry["key_hash"]) == key_hash and int(entry["phy_offset"]) == message.physical_offset:
                entries_at = HEADER_BYTES + index.slots * SLOT_BYTES
                return index.path, entries_at + number * ENTRY_BYTES, HEADER_BYTES + key_hash % index.slots * SLOT_BYTES
    raise AssertionError(f"no entry for {key}")


@pytest.mark.parametrize(
    ("damage", "where"),
    [
        ("slot head past the count", "slot"),
        ("previous entry not before its entry", "prev"),
        ("record offset out of the file's bounds", "offset"),
    ],
)
def test_a_damaged_slot_or_entry_is_rebuilt_and_queries_answer(tmp_path: Path, damage: str, where: str) -> None:
    store = _filled(tmp_path / "store")
    try:
        before = _answers(store)
        assert before == {"key5": [5], "key150": [150], "key299": [299], "U0000000007": [7]}
        path, entry_at, slot_at = _entry_of(store, "key150")
        if where == "slot":
            damage_bytes(path, slot_at, (2**31 - 1).to_bytes(4, "big"))
        elif where == "prev":
            damage_bytes(path, entry_at + 16, (2**30).to_bytes(4, "big"))
        else:
            damage_bytes(path, entry_at + 4, (-5).to_bytes(8, "big", signed=True))
        assert _answers(store) == before, damage
        assert store.damage.counts() == {("indexfile", "rebuilt"): 1}
        assert store.put_messages(make_batch("T", 0, 1, start=COUNT)).ok
        assert [m.queue_offset for m in store.query_messages("T", f"key{COUNT}", 5)] == [COUNT]
    finally:
        store.close()


@pytest.mark.parametrize("which", [1, -1], ids=["an older file", "the newest file"])
def test_a_damaged_header_is_found_at_start_and_the_index_rebuilt(tmp_path: Path, which: int) -> None:
    root = tmp_path / "store"
    store = _filled(root)
    before = _answers(store)
    path = store.index.files[which].path
    store.close()
    damage_bytes(path, 36, (10**6).to_bytes(4, "big"))  # the entry count
    with MessageStore(tiny_config(root)) as store:
        assert _answers(store) == before
        assert store.damage.counts() == {("indexfile", "rebuilt"): 1}
