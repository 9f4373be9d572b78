"""``sparkmq admin``: mqadmin's commands against a real NameServer and broker process.

Most commands run in-process through ``main()`` (stdout captured); the exit-code tests run
``python -m sparkmq admin`` as a subprocess, as an operator would.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from sparkmq.cli.main import main
from sparkmq.client import loop_thread
from sparkmq.client.message import Message
from support.client_harness import Clients
from support.processes import REPO_ROOT, wait_until

pytestmark = pytest.mark.timeout(120)


def admin(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """Run ``sparkmq admin ARGS``; fail with its stderr unless it exits 0; return stdout."""
    code = main(["admin", *args])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out


def test_update_topic_then_list_route_status_and_cluster(ops_cluster, capsys) -> None:
    topic = f"T_{uuid.uuid4().hex[:8]}"
    out = admin(capsys, "updateTopic", "-n", ops_cluster.ns, "-c", "DefaultCluster", "-t", topic, "-r", "3", "-w", "3")
    config_line = (
        f"TopicConfig [topicName={topic}, readQueueNums=3, writeQueueNums=3, perm=RW-, "
        "topicFilterType=SINGLE_TAG, topicSysFlag=0, order=false]"
    )
    assert out.splitlines() == [f"create topic to {ops_cluster.broker.address} success.", config_line]
    assert wait_until(lambda: topic in admin(capsys, "topicList", "-n", ops_cluster.ns).split())
    route = admin(capsys, "topicRoute", "-n", ops_cluster.ns, "-t", topic)
    assert '"brokerName": "broker-a"' in route and '"writeQueueNums": 3' in route
    status = admin(capsys, "topicStatus", "-n", ops_cluster.ns, "-t", topic).splitlines()
    assert status[0].split() == ["#Broker", "Name", "#QID", "#Min", "Offset", "#Max", "Offset", "#Last", "Updated"]
    assert [row.split()[:4] for row in status[1:]] == [["broker-a", str(q), "0", "0"] for q in range(3)]
    assert admin(capsys, "topicClusterList", "-n", ops_cluster.ns, "-t", topic).split() == ["DefaultCluster"]
    cluster = admin(capsys, "clusterList", "-n", ops_cluster.ns).splitlines()
    assert cluster[0].startswith("#Cluster Name") and "#InTPS(LOAD)" in cluster[0]
    assert cluster[1].split()[:4] == ["DefaultCluster", "broker-a", "0", ops_cluster.broker.address]

    deleted = admin(capsys, "deleteTopic", "-n", ops_cluster.ns, "-c", "DefaultCluster", "-t", topic).splitlines()
    assert deleted == [
        f"delete topic [{topic}] from cluster [DefaultCluster] success.",
        f"delete topic [{topic}] from NameServer success.",
    ]
    assert topic not in admin(capsys, "topicList", "-n", ops_cluster.ns).split()


def test_send_then_query_by_key_id_unique_key_offset_and_print(ops_cluster, capsys) -> None:
    topic = ops_cluster.topic(queues=1)
    sent = admin(
        capsys, "sendMessage", "-n", ops_cluster.ns, "-t", topic, "-p", "hello admin", "-k", "order-7", "-c", "books"
    ).splitlines()
    assert sent[0].split() == ["#Broker", "Name", "#QID", "#Send", "Result", "#MsgId"]
    broker, qid, status, msg_id = sent[1].split()
    assert (broker, qid, status) == ("broker-a", "0", "SEND_OK")

    by_key = admin(capsys, "queryMsgByKey", "-n", ops_cluster.ns, "-t", topic, "-k", "order-7").splitlines()
    assert by_key[0].split() == ["#Message", "ID", "#QID", "#Offset"] and by_key[1].split() == [msg_id, "0", "0"]
    detail = admin(capsys, "queryMsgByUniqueKey", "-n", ops_cluster.ns, "-t", topic, "-i", msg_id)
    rows = {line[:20].strip(): line[21:] for line in detail.splitlines()}  # "%-20s %s"
    assert rows["Topic:"] == topic and rows["Tags:"] == "[books]" and rows["Message Body:"] == "hello admin"
    offset_id = rows["OffsetID:"]
    assert f"Topic:               {topic}" in admin(capsys, "queryMsgById", "-n", ops_cluster.ns, "-i", offset_id)
    by_offset = admin(
        capsys, "queryMsgByOffset", "-n", ops_cluster.ns, "-t", topic, "-b", "broker-a", "-i", "0", "-o", "0"
    )
    assert f"OffsetID:            {offset_id}" in by_offset
    printed = admin(capsys, "printMsg", "-n", ops_cluster.ns, "-t", topic).splitlines()
    assert printed[0] == f"minOffset=0, maxOffset=1, MessageQueue [topic={topic}, brokerName=broker-a, queueId=0]"
    assert printed[1].startswith(f"MSGID: {msg_id} ") and printed[1].endswith("BODY: hello admin")
    consumed = admin(capsys, "consumeMessage", "-n", ops_cluster.ns, "-t", topic, "-c", "5").splitlines()
    assert consumed[-1] == "Consume ok" and len(consumed) == 2


def test_consumer_progress_reset_and_connections(ops_cluster, capsys, clients: Clients) -> None:
    topic, group = ops_cluster.topic(queues=2), f"CID_{uuid.uuid4().hex[:8]}"
    producer = clients.producer(f"PID_{uuid.uuid4().hex[:8]}", ops_cluster.ns)
    for i in range(5):
        producer.send(Message(topic, f"m{i}".encode()))
    loop_thread.run(producer._async.instance.heartbeat())  # the first heartbeat would come after 30 s
    got: list[bytes] = []
    consumer = clients.push(group, ops_cluster.ns, topic, lambda m: got.append(m.body))
    assert wait_until(lambda: len(got) == 5, 30)

    connection = admin(capsys, "consumerConnection", "-n", ops_cluster.ns, "-g", group).splitlines()
    assert connection[0].startswith("001  ") and consumer._async.instance.client_id in connection[0]
    assert any(r.endswith("SubExpression: *") and f"Topic: {topic} " in r for r in connection)
    assert "MessageModel: CLUSTERING" in connection and "ConsumeType: CONSUME_PASSIVELY" in connection
    producers = admin(capsys, "producerConnection", "-n", ops_cluster.ns, "-g", producer._async.group, "-t", topic)
    assert producers.startswith("0001  ") and producer._async.instance.client_id in producers
    loop_thread.run(consumer._async.persist_offsets())  # the broker lists a group's topics once it has offsets
    live = admin(capsys, "consumerProgress", "-n", ops_cluster.ns, "-g", group).splitlines()
    ip = consumer._async.instance.client_id.split("@")[0]  # from the member's GET_CONSUMER_RUNNING_INFO answer
    assert [r.split()[5] for r in live[1:-3] if r.startswith(topic)] == [ip, ip]
    clients.close(consumer)  # offsets are committed on close

    reset = admin(capsys, "resetOffsetByTime", "-n", ops_cluster.ns, "-g", group, "-t", topic, "-s", "0").splitlines()
    assert reset[0].startswith(f"rollback consumer offset by specified group[{group}], topic[{topic}], force[true]")
    assert [r.split()[:3] for r in reset[2:]] == [["broker-a", "0", "0"], ["broker-a", "1", "0"]]
    progress = admin(capsys, "consumerProgress", "-n", ops_cluster.ns, "-g", group).splitlines()
    assert progress[0].split()[:3] == ["#Topic", "#Broker", "Name"]
    rows = [r.split() for r in progress[1:-3] if r.startswith(topic)]
    assert [(r[0], r[2], r[4], r[5]) for r in rows] == [(topic, "0", "0", "NA"), (topic, "1", "0", "NA")]
    assert sum(int(r[3]) for r in rows) == 5
    assert progress[-2].startswith("Consume TPS: ") and progress[-1] == "Consume Diff Total: 5"
    assert group in admin(capsys, "consumerProgress", "-n", ops_cluster.ns)
    listed = admin(capsys, "topicList", "-n", ops_cluster.ns, "-c").splitlines()
    assert listed[0].split() == ["#Cluster", "Name", "#Topic", "#Consumer", "Group"]
    assert ["DefaultCluster", topic, group] in [row.split() for row in listed]
    more = admin(capsys, "clusterList", "-n", ops_cluster.ns, "-m").splitlines()
    assert more[0].split()[-4:] == ["#InTotalYest", "#OutTotalYest", "#InTotalToday", "#OutTotalToday"]
    today_in, today_out = (int(x) for x in more[1].split()[-2:])
    assert more[1].split()[:2] == ["DefaultCluster", "broker-a"] and today_in >= 5 and today_out >= 5


def test_groups_broker_config_status_and_write_perm(ops_cluster, capsys) -> None:
    b, ns, group = ops_cluster.broker.address, ops_cluster.ns, f"CID_{uuid.uuid4().hex[:8]}"
    created = admin(capsys, "updateSubGroup", "-n", ns, "-b", b, "-g", group, "-r", "3").splitlines()
    assert created[0] == f"create subscription group to {b} success." and "retryMaxTimes=3" in created[1]
    assert admin(capsys, "deleteSubGroup", "-n", ns, "-b", b, "-g", group).startswith(
        f"delete subscription group [{group}] from broker [{b}]"
    )

    status = dict(line.split(":", 1) for line in admin(capsys, "brokerStatus", "-n", ns, "-b", b).splitlines())
    for key in ("putTps", "getTransferedTps", "msgPutTotalTodayNow", "commitLogMaxOffset", "brokerVersionDesc"):
        assert key.ljust(32) in status
    config = admin(capsys, "getBrokerConfig", "-n", ns, "-b", b).splitlines()
    assert config[0] == f"============{b}============"
    assert "shortPollingTimeMills".ljust(50) + "=  1000" in config
    assert admin(capsys, "updateBrokerConfig", "-n", ns, "-b", b, "-k", "shortPollingTimeMills", "-v", "700") == (
        f"update broker config success, {b}\n"
    )
    assert (
        "shortPollingTimeMills".ljust(50) + "=  700" in admin(capsys, "getBrokerConfig", "-n", ns, "-b", b).splitlines()
    )

    wiped = admin(capsys, "wipeWritePerm", "-n", ns, "-b", "broker-a")
    assert wiped.startswith(f"wipe write perm of broker[broker-a] in name server[{ns}] OK, ")
    assert int(wiped.split(", ")[-1]) > 0
    added = admin(capsys, "addWritePerm", "-n", ns, "-b", "broker-a")
    assert added.startswith(f"add write perm of broker[broker-a] in name server[{ns}] OK, ")


def test_a_refused_update_names_the_reason(ops_cluster, capsys) -> None:
    code = main(
        [
            "admin",
            "updateBrokerConfig",
            "-n",
            ops_cluster.ns,
            "-b",
            ops_cluster.broker.address,
            "-k",
            "noSuchKey",
            "-v",
            "1",
        ]
    )
    assert code == 1
    assert "unknown broker config keys: noSuchKey" in capsys.readouterr().err


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    env.pop("NAMESRV_ADDR", None)
    return subprocess.run(
        [sys.executable, "-m", "sparkmq", "admin", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        timeout=60,
        check=False,
    )


def test_a_bad_flag_prints_usage_and_exits_2() -> None:
    result = _cli("topicStatus", "-n", "127.0.0.1:9876", "-t", "T", "--bogus")
    assert result.returncode == 2
    assert "usage: sparkmq admin topicStatus" in result.stderr and "unrecognized arguments: --bogus" in result.stderr


def test_an_unreachable_namesrv_is_a_clear_error_and_exit_1() -> None:
    with socket_that_refuses() as address:
        result = _cli("topicList", "-n", address)
    assert result.returncode == 1
    assert result.stderr.startswith("sparkmq admin topicList: no NameServer answered (cannot connect to ")
    assert "Traceback" not in result.stderr


def test_no_namesrv_at_all_is_a_clear_error() -> None:
    result = _cli("clusterList")
    assert result.returncode == 1 and "give -n host:port or set NAMESRV_ADDR" in result.stderr


class socket_that_refuses:
    """An address nothing listens on: a port bound (so no one else takes it) but never listening."""

    def __enter__(self) -> str:
        import socket

        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{self._sock.getsockname()[1]}"

    def __exit__(self, *exc_info: object) -> None:
        self._sock.close()
