"""Codes and limits against the reference tables; package purity; the docstring examples."""

from __future__ import annotations

import ast
import doctest
import importlib
import pkgutil
import sys
from pathlib import Path

import pytest

import sparkmq.protocol
from sparkmq.protocol.codes import (
    MAX_FRAME_BYTES,
    MAX_HEADER_BYTES,
    LanguageCode,
    MQVersion,
    RequestCode,
    ResponseCode,
    SerializeType,
    code_name,
)

# RocketMQ 4.9.7's ResponseCode and RequestCode constants (name, code).
RESPONSES = {
    "SUCCESS": 0, "SYSTEM_ERROR": 1, "SYSTEM_BUSY": 2, "REQUEST_CODE_NOT_SUPPORTED": 3, "TRANSACTION_FAILED": 4,
    "FLUSH_DISK_TIMEOUT": 10, "SLAVE_NOT_AVAILABLE": 11, "FLUSH_SLAVE_TIMEOUT": 12, "MESSAGE_ILLEGAL": 13,
    "SERVICE_NOT_AVAILABLE": 14, "VERSION_NOT_SUPPORTED": 15, "NO_PERMISSION": 16, "TOPIC_NOT_EXIST": 17,
    "TOPIC_EXIST_ALREADY": 18, "PULL_NOT_FOUND": 19, "PULL_RETRY_IMMEDIATELY": 20, "PULL_OFFSET_MOVED": 21,
    "QUERY_NOT_FOUND": 22, "SUBSCRIPTION_PARSE_FAILED": 23, "SUBSCRIPTION_NOT_EXIST": 24,
    "SUBSCRIPTION_NOT_LATEST": 25, "SUBSCRIPTION_GROUP_NOT_EXIST": 26, "FILTER_DATA_NOT_EXIST": 27,
    "FILTER_DATA_NOT_LATEST": 28, "TRANSACTION_SHOULD_COMMIT": 200, "TRANSACTION_SHOULD_ROLLBACK": 201,
    "TRANSACTION_STATE_UNKNOW": 202, "TRANSACTION_STATE_GROUP_WRONG": 203, "NO_BUYER_ID": 204,
    "NOT_IN_CURRENT_UNIT": 205, "CONSUMER_NOT_ONLINE": 206, "CONSUME_MSG_TIMEOUT": 207, "NO_MESSAGE": 208,
    "FLOW_CONTROL": 215,
}  # fmt: skip
REQUESTS = {
    "SEND_MESSAGE": 10, "PULL_MESSAGE": 11, "QUERY_MESSAGE": 12, "QUERY_BROKER_OFFSET": 13,
    "QUERY_CONSUMER_OFFSET": 14, "UPDATE_CONSUMER_OFFSET": 15, "UPDATE_AND_CREATE_TOPIC": 17,
    "GET_ALL_TOPIC_CONFIG": 21, "GET_TOPIC_CONFIG_LIST": 22, "GET_TOPIC_NAME_LIST": 23, "UPDATE_BROKER_CONFIG": 25,
    "GET_BROKER_CONFIG": 26, "GET_BROKER_RUNTIME_INFO": 28, "SEARCH_OFFSET_BY_TIMESTAMP": 29, "GET_MAX_OFFSET": 30,
    "GET_MIN_OFFSET": 31, "GET_EARLIEST_MSG_STORETIME": 32, "VIEW_MESSAGE_BY_ID": 33, "HEART_BEAT": 34,
    "UNREGISTER_CLIENT": 35, "CONSUMER_SEND_MSG_BACK": 36, "END_TRANSACTION": 37, "GET_CONSUMER_LIST_BY_GROUP": 38,
    "CHECK_TRANSACTION_STATE": 39, "NOTIFY_CONSUMER_IDS_CHANGED": 40, "LOCK_BATCH_MQ": 41, "UNLOCK_BATCH_MQ": 42,
    "GET_ALL_CONSUMER_OFFSET": 43, "GET_ALL_DELAY_OFFSET": 45, "PUT_KV_CONFIG": 100, "GET_KV_CONFIG": 101,
    "DELETE_KV_CONFIG": 102, "REGISTER_BROKER": 103, "UNREGISTER_BROKER": 104, "GET_ROUTEINFO_BY_TOPIC": 105,
    "GET_BROKER_CLUSTER_INFO": 106, "UPDATE_AND_CREATE_SUBSCRIPTIONGROUP": 200, "GET_ALL_SUBSCRIPTIONGROUP_CONFIG": 201,
    "GET_TOPIC_STATS_INFO": 202, "GET_CONSUMER_CONNECTION_LIST": 203, "GET_PRODUCER_CONNECTION_LIST": 204,
    "WIPE_WRITE_PERM_OF_BROKER": 205, "GET_ALL_TOPIC_LIST_FROM_NAMESERVER": 206, "DELETE_SUBSCRIPTIONGROUP": 207,
    "GET_CONSUME_STATS": 208, "DELETE_TOPIC_IN_BROKER": 215, "DELETE_TOPIC_IN_NAMESRV": 216,
    "GET_KV_CONFIG_BY_VALUE": 217, "RESET_CONSUMER_CLIENT_OFFSET": 220, "GET_CONSUMER_STATUS_FROM_CLIENT": 221,
    "GET_TOPICS_BY_CLUSTER": 224, "QUERY_TOPIC_CONSUME_BY_WHO": 300, "GET_SYSTEM_TOPIC_LIST_FROM_NS": 304,
    "GET_CONSUMER_RUNNING_INFO": 307, "CONSUME_MESSAGE_DIRECTLY": 309, "SEND_MESSAGE_V2": 310,
    "GET_BROKER_CONSUME_STATS": 317, "SEND_BATCH_MESSAGE": 320, "QUERY_CONSUME_QUEUE": 321,
    "QUERY_DATA_VERSION": 322, "SEND_REPLY_MESSAGE": 324, "SEND_REPLY_MESSAGE_V2": 325,
    "PUSH_REPLY_MESSAGE_TO_CLIENT": 326,
}  # fmt: skip
LANGUAGES = ["JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP", "OMS", "RUST"]


@pytest.mark.parametrize(("name", "code"), sorted(RESPONSES.items()))
def test_response_codes(name: str, code: int) -> None:
    assert ResponseCode[name] == code


@pytest.mark.parametrize(("name", "code"), sorted(REQUESTS.items()))
def test_request_codes(name: str, code: int) -> None:
    assert RequestCode[name] == code


def test_languages_serialize_types_versions_limits() -> None:
    assert [m.name for m in sorted(LanguageCode)] == LANGUAGES
    assert list(LanguageCode) == list(range(13))
    assert (SerializeType.JSON, SerializeType.ROCKETMQ) == (0, 1)
    assert (MQVersion.V3_1_8, MQVersion.V3_4_9, MQVersion.V4_6_0, MQVersion.V4_9_4, MQVersion.V4_9_7) == (
        63, 121, 333, 401, 407
    )  # fmt: skip
    assert MAX_FRAME_BYTES == 16777216 and MAX_HEADER_BYTES == 2**24 - 1


def test_code_name() -> None:
    assert code_name(105, response=False) == "GET_ROUTEINFO_BY_TOPIC"
    assert code_name(19, response=True) == "PULL_NOT_FOUND"
    assert code_name(1234, response=False) == "UNKNOWN(1234)"


# --- purity: protocol/ imports only the standard library, sparkmq.errors and itself ----------

PACKAGE_DIR = Path(sparkmq.protocol.__file__).parent
MODULES = sorted(PACKAGE_DIR.glob("*.py"))
#: Optional accelerators: imported by their own module only, which command.py imports under
#: ``except ImportError`` (the pure decoder is the reference, test_plain_header.py).
ACCELERATORS = {"plain_header.py": {"msgspec"}}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_protocol_is_pure(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: stays inside sparkmq.protocol
                continue
            names = [node.module or ""]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            allowed = top in ACCELERATORS.get(path.name, ())
            assert allowed or name == "sparkmq.errors" or top in sys.stdlib_module_names, f"{path.name} imports {name}"
            assert top not in {"asyncio", "socket", "selectors", "ssl"}, f"{path.name} does I/O via {name}"


# --- the examples in the docstrings are true -------------------------------------------------

MODULE_NAMES = [f"sparkmq.protocol.{m.name}" for m in pkgutil.iter_modules(sparkmq.protocol.__path__)]


@pytest.mark.parametrize("name", ["sparkmq.protocol", *MODULE_NAMES])
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def test_every_public_class_has_a_docstring() -> None:
    for name in MODULE_NAMES:
        module = importlib.import_module(name)
        for public in getattr(module, "__all__", []):
            obj = getattr(module, public)
            if isinstance(obj, type):
                assert obj.__doc__, f"{name}.{public} has no docstring"
