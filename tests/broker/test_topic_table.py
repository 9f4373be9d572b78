"""The topic table a promoted replica completes from its store."""

from __future__ import annotations

from pathlib import Path

from sparkmq.broker.topics import READ_WRITE, TopicConfigManager
from sparkmq.protocol import PermName
from sparkmq.protocol.namesrv_bodies import TopicConfig


def test_a_promoted_replica_adopts_the_topics_its_store_holds_and_its_table_lacks(tmp_path: Path) -> None:
    table = TopicConfigManager(
        tmp_path / "topics.json", cluster_name="C", broker_name="b", auto_create=False, default_queue_nums=4
    )
    table.load()
    table.put(TopicConfig("Known", 8, 8, int(PermName.PERM_READ)))
    before = table.data_version.counter
    stored = {"Known": [0], "Late": [0, 3], "%RETRY%g": [0], "rmq_sys_REVIVE_LOG_C": [0], "Empty": []}

    assert sorted(table.adopt_stored(stored)) == ["%RETRY%g", "Late"]

    late = table.get("Late")
    assert late is not None and (late.read_queue_nums, late.write_queue_nums, late.perm) == (4, 4, READ_WRITE)
    known = table.get("Known")
    assert known is not None and known.read_queue_nums == 8 and known.perm != READ_WRITE  # left as it was
    assert table.get("rmq_sys_REVIVE_LOG_C") is None and table.get("Empty") is None
    assert table.data_version.counter > before  # the NameServer hears of them
    assert table.adopt_stored(stored) == []
