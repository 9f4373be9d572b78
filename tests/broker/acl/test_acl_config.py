"""broker.conf keys of issue 13: aclEnable / aclFile (default beside the broker.conf) and the TLS keys."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from sparkmq.broker.config import BrokerConfig, parse_properties
from sparkmq.cli.broker_command import add_broker_arguments, broker_config
from sparkmq.errors import ConfigError


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_broker_arguments(parser)
    return parser.parse_args(list(argv))


def test_acl_file_defaults_to_plain_acl_yml_beside_the_broker_conf(tmp_path: Path) -> None:
    conf = tmp_path / "conf" / "broker.conf"
    conf.parent.mkdir()
    conf.write_text("aclEnable=true\n")
    config = broker_config(parse("-c", str(conf)))
    assert config.acl_enable and config.acl_path() == tmp_path / "conf" / "plain_acl.yml"
    conf.write_text(f"aclEnable=true\naclFile={tmp_path / 'elsewhere.yml'}\n")
    assert broker_config(parse("-c", str(conf))).acl_path() == tmp_path / "elsewhere.yml"
    assert BrokerConfig().acl_path() == Path("conf") / "plain_acl.yml"  # no broker.conf: RocketMQ's home layout


def test_tls_keys_in_rocketmq_spelling() -> None:
    config = BrokerConfig.from_properties(
        parse_properties(
            "tlsEnable=true\ntls.server.mode=enforcing\ntls.server.certPath=/c.pem\ntls.server.keyPath=/k.pem\n"
        )
    )
    assert config.tls_on and config.tls_server_mode == "enforcing"
    assert config.tls_server_cert_path == Path("/c.pem") and config.tls_server_key_path == Path("/k.pem")
    disabled = BrokerConfig.from_properties({"tlsEnable": "true", "tls.server.mode": "disabled"})
    assert not disabled.tls_on and disabled.server_tls() is None
    with pytest.raises(ConfigError, match="tls.server.mode 'strict' is not one of"):
        BrokerConfig.from_properties({"tls.server.mode": "strict"})
