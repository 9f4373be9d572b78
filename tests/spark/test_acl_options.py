"""Issue 13: the Spark sink and source sign with their ``accessKey`` / ``secretKey`` options (ACL 1.0)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest
from pyspark.sql import functions as F

from sparkmq.client import ClientSecurity
from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.protocol.admin_headers import CreateTopicRequestHeader
from sparkmq.remoting import RemotingClient
from support.client_harness import wait_for_route
from support.processes import BrokerProcess, NamesrvProcess

ACCOUNTS = """\
accounts:
  - accessKey: sparkUser
    secretKey: sparkSecret
    admin: true
"""


@pytest.fixture(scope="module")
def acl_ns(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    root = tmp_path_factory.mktemp("spark-acl")
    (root / "plain_acl.yml").write_text(ACCOUNTS)
    with (
        NamesrvProcess.start() as namesrv,
        BrokerProcess.start(
            root / "store", namesrv.address, "--set", "aclEnable=true", "--set", f"aclFile={root / 'plain_acl.yml'}"
        ) as broker,
    ):
        yield namesrv.address, broker.address


def create_topic(namesrv: str, broker: str) -> str:
    topic = f"SparkAcl_{uuid.uuid4().hex[:8]}"
    header = CreateTopicRequestHeader(topic, "TBW102", 2, 2, 6, "SINGLE_TAG", False).to_fields()

    async def call() -> int:
        client = RemotingClient(signer=ClientSecurity.of("sparkUser", "sparkSecret").signer())
        try:
            return (await client.invoke(broker, RequestCode.UPDATE_AND_CREATE_TOPIC, header)).code
        finally:
            await client.close()

    assert asyncio.run(call()) == ResponseCode.SUCCESS
    wait_for_route(namesrv, topic, {"broker-a"})
    return topic


def test_sink_and_source_with_credentials(spark, acl_ns) -> None:
    namesrv, broker = acl_ns
    topic = create_topic(namesrv, broker)
    creds = {"namesrvAddr": namesrv, "accessKey": "sparkUser", "secretKey": "sparkSecret"}
    rows = [(f"body-{i}".encode(),) for i in range(20)]
    spark.createDataFrame(rows, "body binary").write.format("sparkmq").mode("append").options(
        **creds, topic=topic
    ).save()
    back = spark.read.format("sparkmq").options(**creds, topic=topic).load()
    assert sorted(r.body for r in back.select("body").collect()) == sorted(r[0] for r in rows)

    wrong = {**creds, "secretKey": "wrongSecret"}
    with pytest.raises(Exception, match="Check signature failed for accessKey=sparkUser"):
        spark.read.format("sparkmq").options(**wrong, topic=topic).load().select(F.count("*")).collect()
