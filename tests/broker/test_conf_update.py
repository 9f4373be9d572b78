"""updateBrokerConfig is written into the broker.conf given with -c: the operator's lines stay, the
updated keys read back exactly, and a broker restarted from that file has them."""

from __future__ import annotations

import asyncio
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkmq.broker.conf_update import persist_updates, updated_properties_text
from sparkmq.broker.config import parse_properties
from sparkmq.client.admin_ext import AdminExt
from sparkmq.errors import ConfigError, RemoteError
from sparkmq.protocol import ResponseCode
from support.processes import BrokerProcess, NamesrvProcess

OPERATOR_FILE = """# broker-a, written by hand
brokerClusterName = DefaultCluster
! a bang comment
maxMessageSize : 1048576
namesrvAddr=127.0.0.1:1;\\
    127.0.0.1:2
deleteWhen 04
deleteWhen 05"""


def test_only_the_updated_keys_change_and_everything_else_stays() -> None:
    text = updated_properties_text(
        OPERATOR_FILE, {"namesrvAddr": "127.0.0.1:3", "deleteWhen": "01", "fileReservedTime": "48"}
    )
    assert text.splitlines() == [
        "# broker-a, written by hand",
        "brokerClusterName = DefaultCluster",
        "! a bang comment",
        "maxMessageSize : 1048576",
        "namesrvAddr=127.0.0.1:3",  # the continued block became one line
        "deleteWhen=01",  # the first of the duplicates rewritten, the later one (which would win) gone
        "fileReservedTime=48",
    ]


def test_an_empty_value_removes_the_key() -> None:
    text = updated_properties_text(OPERATOR_FILE, {"maxMessageSize": ""})
    assert "maxMessageSize" not in parse_properties(text)
    assert parse_properties(text)["deleteWhen"] == "05"


@settings(max_examples=300)
@given(
    st.dictionaries(
        st.sampled_from(["messageDelayLevel", "deleteWhen", "namesrvAddr", "regionId", "tls.server.mode"]),
        st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30),
        min_size=1,
    )
)
def test_any_value_reads_back_exactly(updates: dict[str, str]) -> None:
    # leading/trailing whitespace, backslashes, '=' and ':', newlines, unicode: all escaped so that
    # java.util.Properties reads the value the admin sent
    reread = parse_properties(updated_properties_text(OPERATOR_FILE, updates))
    assert {k: reread[k] for k in updates} == updates


def test_a_file_that_cannot_be_written_raises_config_error(tmp_path) -> None:
    (tmp_path / "conf").write_text("not a directory")
    with pytest.raises(ConfigError, match="cannot"):
        persist_updates(tmp_path / "conf" / "broker.conf", {"deleteWhen": "01"})


def test_update_is_written_to_broker_conf_and_survives_a_restart(tmp_path) -> None:
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    conf = conf_dir / "broker.conf"
    conf.write_text("# mine\nbrokerName=broker-conf\ndeleteWhen=04\n")

    async def update(address: str, ns: str, values: dict[str, str]) -> dict[str, str]:
        async with AdminExt(ns) as admin:
            await admin.update_broker_config(address, values)
            return await admin.broker_config(address)

    async def config_of(address: str, ns: str) -> dict[str, str]:
        async with AdminExt(ns) as admin:
            return await admin.broker_config(address)

    with NamesrvProcess.start() as ns:
        with BrokerProcess.start(tmp_path / "store", ns.address, "-c", str(conf)) as broker:
            applied = asyncio.run(update(broker.address, ns.address, {"deleteWhen": "01", "brokerName": "renamed"}))
            assert applied["deleteWhen"] == "01" and applied["brokerName"] == "broker-conf"
            assert conf.read_text().splitlines() == ["# mine", "brokerName=broker-conf", "deleteWhen=01"]
            assert (conf_dir / "broker.conf.bak").read_text().endswith("deleteWhen=04\n")

            # the directory of broker.conf replaced by a file: the update is refused and not applied
            shutil.rmtree(conf_dir)
            conf_dir.write_text("in the way")
            with pytest.raises(RemoteError) as refused:
                asyncio.run(update(broker.address, ns.address, {"deleteWhen": "02"}))
            assert refused.value.code == ResponseCode.SYSTEM_ERROR and "not applied" in str(refused.value)
            assert asyncio.run(config_of(broker.address, ns.address))["deleteWhen"] == "01"
            conf_dir.unlink()
            conf_dir.mkdir()
            conf.write_text("brokerName=broker-conf\ndeleteWhen=01\n")
        with BrokerProcess.start(tmp_path / "store", ns.address, "-c", str(conf)) as restarted:
            assert asyncio.run(config_of(restarted.address, ns.address))["deleteWhen"] == "01"
