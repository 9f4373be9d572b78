"""ACL credentials of the operator tools: passed to the client as ``security=`` when the client has
ACL support, refused with a clear error when it does not (never silently dropped)."""

from __future__ import annotations

import importlib.util

import pytest

from sparkmq.errors import ConfigError
from sparkmq.ops.credentials import client_options
from sparkmq.ops.dashboard import DashboardConfig


def test_no_credentials_no_options_and_read_only() -> None:
    assert client_options(None, None) == {}
    assert not DashboardConfig("127.0.0.1:9876").writable
    assert DashboardConfig("127.0.0.1:9876", allow_writes=True).writable


def test_half_a_pair_is_refused() -> None:
    with pytest.raises(ConfigError, match="both --access-key and --secret-key"):
        client_options("RocketMQ", None)


def test_a_pair_reaches_the_client_or_is_refused_by_name() -> None:
    assert DashboardConfig("127.0.0.1:9876", access_key="RocketMQ", secret_key="12345678").writable
    if importlib.util.find_spec("sparkmq.client.security") is None:  # this build's client cannot sign requests
        with pytest.raises(ConfigError, match="no ACL support"):
            client_options("RocketMQ", "12345678")
    else:
        security = client_options("RocketMQ", "12345678")["security"]
        assert security.credentials.access_key == "RocketMQ"
