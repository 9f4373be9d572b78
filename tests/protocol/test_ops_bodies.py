"""Bodies and headers of mqadmin's operational commands, against exact bytes (Java field names)."""

from __future__ import annotations

import pytest

from sparkmq.errors import InvalidFieldError
from sparkmq.protocol.admin_bodies import Connection
from sparkmq.protocol.ops_bodies import (
    BrokerStatsData,
    BrokerStatsItem,
    DeleteSubscriptionGroupRequestHeader,
    ProducerConnection,
    ProducerGroupRequestHeader,
    SubscriptionGroupBody,
    ViewBrokerStatsDataRequestHeader,
    parse_properties_text,
    properties_text,
)


def test_broker_stats_data_bytes_and_back() -> None:
    data = BrokerStatsData(BrokerStatsItem(6, 0.1, 2.5), BrokerStatsItem(60, 0.02, 1.0), BrokerStatsItem())
    wire = data.encode()
    assert wire == (
        b'{"statsDay":{"avgpt":0.0,"sum":0,"tps":0.0},"statsHour":{"avgpt":1.0,"sum":60,"tps":0.02},'
        b'"statsMinute":{"avgpt":2.5,"sum":6,"tps":0.1}}'
    )
    assert BrokerStatsData.decode(wire) == data


def test_producer_connection_bytes_and_back() -> None:
    body = ProducerConnection((Connection("10.0.0.1@1#ab", "10.0.0.1:5000", "CPP", 333),))
    wire = body.encode()
    expected = b'{"connectionSet":[{"clientAddr":"10.0.0.1:5000","clientId":"10.0.0.1@1#ab",'
    expected += b'"language":"CPP","version":333}]}'
    assert wire == expected
    assert ProducerConnection.decode(wire) == body


def test_subscription_group_body_reads_java_json() -> None:
    java = (
        b'{"brokerId":0,"consumeBroadcastEnable":false,"consumeEnable":true,"consumeFromMinEnable":true,'
        b'"groupName":"CID_billing","notifyConsumerIdsChangedEnable":true,"retryMaxTimes":3,"retryQueueNums":1,'
        b'"whichBrokerWhenConsumeSlowly":1}'
    )
    body = SubscriptionGroupBody.decode(java)
    assert body == SubscriptionGroupBody("CID_billing", True, 1, 3, False)
    assert body.encode() == java
    with pytest.raises(InvalidFieldError, match="groupName"):
        SubscriptionGroupBody.decode(b'{"consumeEnable":true}')


def test_headers_use_java_keys() -> None:
    assert ProducerGroupRequestHeader("PID").to_fields() == {"producerGroup": "PID"}
    assert DeleteSubscriptionGroupRequestHeader("G", True).to_fields() == {"groupName": "G", "cleanOffset": "true"}
    assert ViewBrokerStatsDataRequestHeader.from_fields({"statsName": "TOPIC_PUT_NUMS", "statsKey": "T"}) == (
        ViewBrokerStatsDataRequestHeader("TOPIC_PUT_NUMS", "T")
    )


def test_properties_text_round_trip_and_a_bad_line() -> None:
    text = properties_text({"listenPort": "10911", "brokerName": "broker-a"})
    assert text == "brokerName=broker-a\nlistenPort=10911\n"
    assert parse_properties_text(("# comment\n\n" + text).encode()) == {"brokerName": "broker-a", "listenPort": "10911"}
    with pytest.raises(InvalidFieldError, match="line 2 is not key=value"):
        parse_properties_text(b"a=1\nnot a pair\n")
