"""``updateTopic`` attributes over the wire (kept as RocketMQ 5 keeps them, refused with a remark); broker.conf keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkmq.broker.config import BrokerConfig
from sparkmq.errors import ConfigError
from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.protocol.namesrv_bodies import TopicConfigSerializeWrapper
from support.broker_wire import Wire, run_broker


def _create(topic: str, attributes: str | None = None) -> dict[str, str]:
    fields = {
        "topic": topic,
        "defaultTopic": "TBW102",
        "readQueueNums": "2",
        "writeQueueNums": "2",
        "perm": "6",
        "topicFilterType": "SINGLE_TAG",
        "order": "false",
    }
    return fields if attributes is None else fields | {"attributes": attributes}


def test_attributes_are_added_kept_deleted_and_refused_with_a_remark(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        ok = await w.call(RequestCode.UPDATE_AND_CREATE_TOPIC, _create("orders", "+table.enable=true"))
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        kept = await w.call(RequestCode.UPDATE_AND_CREATE_TOPIC, _create("orders"))  # no -a: attributes stay
        assert kept.code == ResponseCode.SUCCESS
        changed = await w.call(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            _create("orders", "+table.format=json,+table.schema=id BIGINT, name STRING,-table.enable"),
        )
        assert changed.code == ResponseCode.SUCCESS, changed.remark
        for bad, remark in [
            ("+table.format=avro", "bad table.format value 'avro'"),
            ("+table.nope=1", "unsupported key: table.nope"),
            ("+table.schema=id BIGINTEGER", "unsupported type 'BIGINTEGER'"),
            ("-table.partitionBy", "attempt to delete a nonexistent key: table.partitionBy"),
        ]:
            refused = await w.call(RequestCode.UPDATE_AND_CREATE_TOPIC, _create("orders", bad))
            assert refused.code == ResponseCode.SYSTEM_ERROR and remark in (refused.remark or ""), refused.remark
        created_bad = await w.call(RequestCode.UPDATE_AND_CREATE_TOPIC, _create("fresh", "-table.enable"))
        assert "only add attribute is supported while creating topic" in (created_bad.remark or "")
        configs = TopicConfigSerializeWrapper.decode(
            (await w.call(RequestCode.GET_ALL_TOPIC_CONFIG, {})).body
        ).topic_config_table
        assert configs["orders"].attribute_map == {"table.format": "json", "table.schema": "id BIGINT, name STRING"}
        assert "fresh" not in configs

    run_broker(tmp_path, scenario)
    stored = json.loads((tmp_path / "config" / "topics.json").read_text())["topicConfigTable"]["orders"]
    assert stored["attributes"] == {"table.format": "json", "table.schema": "id BIGINT, name STRING"}

    async def after_restart(w: Wire) -> None:
        body = (await w.call(RequestCode.GET_ALL_TOPIC_CONFIG, {})).body
        assert (
            TopicConfigSerializeWrapper.decode(body).topic_config_table["orders"].attribute_map["table.format"]
            == "json"
        )

    run_broker(tmp_path, after_restart)


def test_the_table_settings_of_broker_conf_are_checked() -> None:
    config = BrokerConfig.from_properties({"tableTopicRoot": "/data/tables", "tableTopicCommitIntervalMs": "200"})
    assert (config.table_topic_root, config.table_topic_commit_interval_ms) == ("/data/tables", 200)
    assert BrokerConfig().table_topic_root == "" and BrokerConfig().table_topic_commit_interval_ms == 5000
    with pytest.raises(ConfigError, match="tableTopicCommitIntervalMs 0 must be positive"):
        BrokerConfig.from_properties({"tableTopicCommitIntervalMs": "0"})
    with pytest.raises(ConfigError, match="tableTopicRoot memory:// cannot hold a table"):
        BrokerConfig.from_properties({"tableTopicRoot": "memory:///tables"})
