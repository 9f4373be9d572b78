"""broker.conf: Java .properties syntax in full, one table of known keys, unknown and ignored keys logged."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest

from sparkmq.broker.config import BROKER_CONF_KEYS, BrokerConfig, parse_properties
from sparkmq.errors import ConfigError

JAVA_STYLE = r"""
# a comment
! another comment
brokerName broker-b
brokerClusterName:ClusterX
namesrvAddr = 127.0.0.1:9876;\
              127.0.0.2:9876
storePathRootDir=/data/rocketmq\u002Fstore
messageDelayLevel=1s\t5s
listenPort   =   10921
"""


def test_every_java_properties_form_is_read_like_java_util_properties() -> None:
    properties = parse_properties(JAVA_STYLE)

    assert properties == {
        "brokerName": "broker-b",
        "brokerClusterName": "ClusterX",
        "namesrvAddr": "127.0.0.1:9876;127.0.0.2:9876",
        "storePathRootDir": "/data/rocketmq/store",
        "messageDelayLevel": "1s\t5s",
        "listenPort": "10921",
    }
    config = BrokerConfig.from_properties(properties)
    assert config.namesrv_addresses() == ["127.0.0.1:9876", "127.0.0.2:9876"]
    assert config.store_path_root_dir == Path("/data/rocketmq/store")
    assert (config.broker_name, config.listen_port) == ("broker-b", 10921)


def test_a_broken_escape_is_a_config_error_naming_the_source() -> None:
    with pytest.raises(ConfigError, match="my.conf is not a Java properties file"):
        parse_properties("brokerName=\\u12", source="my.conf")


def test_an_unknown_key_is_logged_and_ignored(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="sparkmq.broker.config"):
        config = BrokerConfig.from_properties({"brokerNmae": "typo", "brokerName": "b1"})

    assert config.broker_name == "b1"
    assert "'brokerNmae' is not one sparkmq knows" in caplog.text


def test_a_known_key_sparkmq_does_not_act_on_says_so(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="sparkmq.broker.config"):
        config = BrokerConfig.from_properties({"sendMessageThreadPoolNums": "128", "listenPort": "0"})

    assert "sendMessageThreadPoolNums=128 is not honoured: sparkmq serves requests on one event loop" in caplog.text
    assert config.listen_port == 0


def test_a_bad_value_of_a_known_key_names_the_key() -> None:
    with pytest.raises(ConfigError, match="listenPort='ten' is not a valid int"):
        BrokerConfig.from_properties({"listenPort": "ten"})


def test_every_config_field_has_exactly_one_key_in_the_table() -> None:
    fields = [f.name for f in dataclasses.fields(BrokerConfig) if f.name != "config_file"]  # the -c path: no key
    rows = [known.field for known in BROKER_CONF_KEYS.values() if known.field is not None]

    assert sorted(rows) == sorted(fields)


def test_tls_keys_read_under_either_spelling() -> None:
    dotted = BrokerConfig.from_properties({"tls.enable": "true", "tls.server.mode": "disabled"})
    camel = BrokerConfig.from_properties({"tlsEnable": "true", "tlsServerMode": "disabled"})

    assert (
        (dotted.tls_enable, dotted.tls_server_mode) == (camel.tls_enable, camel.tls_server_mode) == (True, "disabled")
    )
