"""SQL92 property filtering: the evaluator's semantics (RocketMQ's), its errors, and the broker
serving SQL92 subscriptions over real frames (PULL_MESSAGE, HEART_BEAT, CHECK_CLIENT_CONFIG)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkmq.broker.filtering import SubscriptionParseError
from sparkmq.broker.sql92 import compile_sql92
from sparkmq.message.record import iter_records
from sparkmq.protocol import PullSysFlag, RequestCode, ResponseCode
from sparkmq.protocol.heartbeat import CheckClientRequestBody, SubscriptionData
from support.broker_wire import Wire, run_broker

PROPS = {"a": "7", "b": "2.5", "s": "red", "flag": "true", "big": "3000000000", "word": "x7"}


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("a > 5", True),
        ("a >= 7", True),
        ("a < 7", False),
        ("a <= 7", True),
        ("a = 7", True),
        ("a <> 7", False),
        ("a = 7.0", True),
        ("b > 2", False),  # Java: Integer.valueOf("2.5") throws, so no match
        ("b > 2.4", True),
        ("b BETWEEN 2 AND 3", False),
        ("b BETWEEN 2.0 AND 3.0", True),
        ("a BETWEEN 1 AND 7", True),
        ("a NOT BETWEEN 1 AND 7", False),
        ("a BETWEEN 8 AND 9", False),
        ("s = 'red'", True),
        ("s <> 'red'", False),
        ("s = 'blue'", False),
        ("s IN ('blue', 'red')", True),
        ("s NOT IN ('blue', 'red')", False),
        ("s CONTAINS 'e'", True),
        ("s STARTSWITH 're'", True),
        ("s ENDSWITH 'x'", False),
        ("s NOT ENDSWITH 'x'", True),
        ("flag = TRUE", True),
        ("flag = FALSE", False),
        ("missing IS NULL", True),
        ("a IS NOT NULL", True),
        ("a IS NULL", False),
        ("missing > 1", False),
        ("NOT (missing > 1)", False),
        ("missing = 'x'", False),
        ("missing IN ('x')", False),
        ("NOT (a > 5)", False),
        ("a > 5 AND s = 'red'", True),
        ("a > 5 AND missing = 1", False),
        ("a > 9 OR s = 'red'", True),
        ("missing = 1 OR s = 'red'", True),
        ("missing = 1 OR s = 'blue'", False),
        ("(a > 9 OR a < 8) AND NOT (s = 'blue')", True),
        ("NOT s = 'blue'", False),
        ("TRUE", True),
        ("FALSE", False),
        ("a > -8", True),
        ("big > 5", False),  # an Integer constant: Integer.valueOf("3000000000") overflows in Java
        ("big > 5000000000", False),
        ("big > 2999999999", True),  # a Long constant converts as a long
        ("word > 5", False),
        ("word > 5 OR s = 'red'", False),  # Java's evaluator throws: the message does not match
        ("a > 5 and s = 'red'", True),
        ("a between 1 and 9", True),  # keywords in any case
        ("s = 'it''s'", False),
        ("s > 5", False),
    ],
)
def test_evaluation_follows_rocketmq(expression: str, expected: bool) -> None:
    assert compile_sql92(expression).matches(PROPS) is expected


def test_quotes_are_escaped_by_doubling() -> None:
    assert compile_sql92("s = 'it''s'").matches({"s": "it's"})


@pytest.mark.parametrize(
    ("expression", "where"),
    [
        ("a >", "column 4: unexpected end of expression"),
        ("a > > 1", "column 5"),
        ("a IN (1, 2)", "column 7"),
        ("(a = 1", "column 7: unexpected end"),
        ("a = 'unterminated", "column 5"),
        ("a > 'x'", "cannot be compared"),
        ("NOT a > 1", "NOT binds tighter"),
        ("a BETWEEN 5 AND 1", "must be less than or equal"),
        ("'just a string'", "will not result in a boolean"),
        ("", "empty"),
        ("a = 99999999999999999999", "64-bit"),
    ],
)
def test_bad_expressions_name_the_problem(expression: str, where: str) -> None:
    with pytest.raises(SubscriptionParseError) as caught:
        compile_sql92(expression)
    assert caught.value.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    assert where in caught.value.remark


# --- over the wire ----------------------------------------------------------------------------

TOPIC = "SqlTopic"
SQL = "n >= 10 AND color = 'red'"


async def fill(w: Wire, count: int = 40) -> None:
    for n in range(count):
        await w.send_ok(TOPIC, b"m%d" % n, props={"n": str(n), "color": ("red", "blue")[n % 2]})


async def sql_pull(
    w: Wire,
    offset: int,
    expression: str,
    *,
    max_nums: int = 32,
    flags: int = PullSysFlag.SUBSCRIPTION,
    group: str = "G",
) -> tuple[int, str | None, list[int], int]:
    fields = {
        "consumerGroup": group,
        "topic": TOPIC,
        "queueId": "0",
        "queueOffset": str(offset),
        "maxMsgNums": str(max_nums),
        "sysFlag": str(int(flags)),
        "commitOffset": "0",
        "suspendTimeoutMillis": "0",
        "subscription": expression,
        "subVersion": "0",
        "expressionType": "SQL92",
    }
    response = await w.call(RequestCode.PULL_MESSAGE, fields)
    numbers = [int(m.properties["n"]) for m in iter_records(response.body, check_crc=True)] if response.body else []
    return response.code, response.remark, numbers, int(response.ext_fields.get("nextBeginOffset", -1))


def check_request(expression: str, expression_type: str = "SQL92") -> bytes:
    return CheckClientRequestBody(
        "client-1", "G", SubscriptionData(TOPIC, expression, expression_type=expression_type)
    ).encode()


def test_the_broker_filters_pulls_by_sql92(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        await fill(w)
        code, _, numbers, next_offset = await sql_pull(w, 0, SQL)
        assert code == ResponseCode.SUCCESS
        assert numbers == list(range(10, 40, 2)) and next_offset == 40
        code, _, numbers, next_offset = await sql_pull(w, 0, SQL, max_nums=4)
        assert numbers == [10, 12, 14, 16] and next_offset == 17  # resumes right after the last one taken
        code, _, numbers, next_offset = await sql_pull(w, 0, "color = 'green'")
        assert code == ResponseCode.PULL_RETRY_IMMEDIATELY and numbers == [] and next_offset == 40

    run_broker(tmp_path / "store", scenario, enable_property_filter=True)


def test_a_bad_expression_gets_subscription_parse_failed_with_the_position(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        await fill(w, 2)
        code, remark, _, _ = await sql_pull(w, 0, "n >= AND color = 'red'")
        assert code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "column 6" in (remark or "")
        response = await w.call(RequestCode.CHECK_CLIENT_CONFIG, body=check_request("n >"))
        assert response.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "column 4" in (response.remark or "")
        assert (await w.call(RequestCode.CHECK_CLIENT_CONFIG, body=check_request(SQL))).code == ResponseCode.SUCCESS
        code, _, numbers, _ = await sql_pull(w, 0, "n = 1")  # the broker keeps serving
        assert code == ResponseCode.SUCCESS and numbers == [1]

    run_broker(tmp_path / "store", scenario, enable_property_filter=True)


def test_sql92_is_refused_clearly_unless_the_broker_enables_it(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        await fill(w, 2)
        code, remark, _, _ = await sql_pull(w, 0, SQL)
        assert code == ResponseCode.SYSTEM_ERROR
        assert remark == "The broker does not support consumer to filter message by SQL92"
        response = await w.call(RequestCode.CHECK_CLIENT_CONFIG, body=check_request(SQL))
        assert (response.code, response.remark) == (ResponseCode.SYSTEM_ERROR, remark)
        tag_check = await w.call(RequestCode.CHECK_CLIENT_CONFIG, body=check_request("*", "TAG"))
        assert tag_check.code == ResponseCode.SUCCESS

    run_broker(tmp_path / "store", scenario)


def test_a_heartbeat_subscription_by_sql92_filters_pulls_without_the_subscription_flag(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        await fill(w)
        body = {
            "clientID": "c1",
            "consumerDataSet": [
                {
                    "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                    "consumeType": "CONSUME_PASSIVELY",
                    "groupName": "HB",
                    "messageModel": "CLUSTERING",
                    "subscriptionDataSet": [
                        {"topic": TOPIC, "subString": "n < 3", "expressionType": "SQL92", "subVersion": 1}
                    ],
                }
            ],
            "producerDataSet": [],
        }
        assert (await w.call(RequestCode.HEART_BEAT, body=json.dumps(body).encode())).code == ResponseCode.SUCCESS
        code, _, numbers, _ = await sql_pull(w, 0, "ignored", flags=0, group="HB")
        assert code == ResponseCode.SUCCESS and numbers == [0, 1, 2]

    run_broker(tmp_path / "store", scenario, enable_property_filter=True)
