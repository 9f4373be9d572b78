"""Automatic failover in controller mode (RocketMQ 5's design), as real processes.

A NameServer with the controller embedded (``enableControllerInNamesrv=true``), three brokers
with ``enableControllerMode=true``, SYNC_MASTER with ``allAckInSyncStateSet=true``; SIGKILL of
the master, SIGSTOP of replicas to make a divergent tail or a lagging replica.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkmq import Message, Producer
from sparkmq.message.properties import encode_properties
from sparkmq.protocol import RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.bodies import TopicRouteData
from sparkmq.protocol.controller_bodies import BrokerReplicasInfo
from sparkmq.protocol.frame import FrameDecoder
from support.controller_group import (
    FAST,
    GROUP,
    UNTIL_S,
    ControllerGroup,
    ask,
    assert_commitlogs_identical,
    commitlog_bytes,
    read_all,
    send_until_ok,
)
from support.processes import BrokerProcess, NamesrvProcess, ServiceProcess, wait_until
from support.rocketmq_cpp import CppClientRun


@pytest.fixture
def group(tmp_path: Path) -> Iterator[ControllerGroup]:
    with ControllerGroup(tmp_path, 3) as started:
        assert wait_until(started.all_in_sync, UNTIL_S), "the group never had a master with every replica in sync"
        yield started


def route_master(namesrv: str, topic: str) -> str | None:
    response = ask(namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    if response.code != ResponseCode.SUCCESS:
        return None
    for broker in TopicRouteData.decode(response.body).broker_datas:
        if broker.broker_name == GROUP:
            return broker.broker_addrs.get(0)
    return None


def send_request(topic: str, body: bytes) -> RemotingCommand:
    """SEND_MESSAGE_V2 as the Java client sends it, waiting for the store (WAIT=true)."""
    fields = {
        "a": "PID_CTL",
        "b": topic,
        "c": "TBW102",
        "d": "4",
        "e": "0",
        "f": "0",
        "g": "1700000000000",
        "h": "0",
        "i": encode_properties({"WAIT": "true"}).decode(),
    }
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, 1, ext_fields=fields, body=body)


def read_response(connection: socket.socket) -> RemotingCommand:
    decoder = FrameDecoder()
    while True:
        data = connection.recv(65536)
        assert data, "the broker closed the connection without answering"
        commands = decoder.feed(data)
        if commands:
            return commands[0]


def test_sigkill_of_the_master_elects_a_replica_that_holds_every_acknowledged_message(group: ControllerGroup) -> None:
    assert group.namesrv is not None
    namesrv, topic = group.namesrv.address, "CtlFailover"
    old_id, _address, old_epoch, old_sync = group.replica_info()
    old = group.master_index()
    assert old is not None and old_sync.members == {1, 2, 3}
    acknowledged: list[bytes] = []
    with Producer("PID_CTL", namesrv, send_timeout_s=5.0) as producer:
        for i in range(40):
            producer.send(Message(topic, b"before %d" % i))
            acknowledged.append(b"before %d" % i)
        replicas = [i for i in group.live() if i != old]
        group.kill(old)
        assert wait_until(lambda: group.master_index() in replicas, UNTIL_S), "no replica was elected"
        new_id, new_address, new_epoch, _sync = group.replica_info()
        assert new_id in old_sync.members and new_id != old_id and new_epoch == old_epoch + 1
        send_until_ok(producer, topic, b"after 0")
        acknowledged.append(b"after 0")
        assert route_master(namesrv, topic) == new_address
        for i in range(1, 20):
            producer.send(Message(topic, b"after %d" % i))
            acknowledged.append(b"after %d" % i)
    assert set(acknowledged) <= read_all(namesrv, topic, set(acknowledged))

    group.start_broker(old)  # the old master comes back: truncates its tail, follows the new master
    assert wait_until(group.all_in_sync, UNTIL_S), "the old master never rejoined the SyncStateSet"
    assert group.master_index() != old
    assert_commitlogs_identical(group)
    cache = group.epoch_cache(old)
    assert cache is not None and [e.epoch for e in cache.epoch_list] == [old_epoch, new_epoch]


def test_a_master_cut_off_while_the_group_moved_on_truncates_its_divergent_tail(group: ControllerGroup) -> None:
    """SIGSTOP of the master: the controller elects a replica. The old master resumes while the
    controller is stopped in turn, so it still believes it is master: a send to it is stored there
    and never acknowledged. Once the controller is back, the old master learns the new epoch, cuts
    that tail and follows the new master."""
    assert group.namesrv is not None
    namesrv, topic = group.namesrv.address, "CtlSplit"
    old = group.master_index()
    old_broker = group.brokers[old] if old is not None else None
    assert old is not None and old_broker is not None
    with Producer("PID_CTL", namesrv) as producer:
        for i in range(10):
            producer.send(Message(topic, b"before %d" % i))
        _id, _address, old_epoch, _sync = group.replica_info()
        os.kill(old_broker.pid, signal.SIGSTOP)
        replicas = [i for i in group.live() if i != old]
        assert wait_until(lambda: group.master_index() in replicas, UNTIL_S), "no replica was elected"
        send_until_ok(producer, topic, b"after 0")
    assert wait_until(lambda: len(group.replica_info()[3].members) == 2, UNTIL_S)  # both replicas follow the new one
    os.kill(group.namesrv.pid, signal.SIGSTOP)
    try:
        os.kill(old_broker.pid, signal.SIGCONT)
        host, port = old_broker.address.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=UNTIL_S) as late:
            late.sendall(send_request(topic, b"sent to the old master").encode())
            answer = read_response(late)
    finally:
        os.kill(group.namesrv.pid, signal.SIGCONT)
    assert answer.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, answer  # stored there, never acknowledged
    assert wait_until(group.all_in_sync, UNTIL_S), "the old master never rejoined as a replica"
    assert group.master_index() != old
    end = assert_commitlogs_identical(group)
    assert b"sent to the old master" not in commitlog_bytes(group.store_dir(old), end)
    assert any("truncating" in line for line in old_broker.output)
    cache = group.epoch_cache(old)  # the new term (a stopped controller may have run one more election)
    assert cache is not None and [e.epoch for e in cache.epoch_list][:2] == [old_epoch, old_epoch + 1]


def test_a_replica_outside_the_sync_state_set_is_not_elected(tmp_path: Path) -> None:
    """enableElectUncleanMaster=false: a lagging replica dropped from the SyncStateSet stays a replica
    when the master dies; the old master's return brings the group back."""
    with ControllerGroup(tmp_path, 2) as group:
        assert wait_until(group.all_in_sync, UNTIL_S)
        assert group.namesrv is not None
        master = group.master_index()
        assert master is not None
        replica = 1 - master
        master_id, _address, epoch, _sync = group.replica_info()
        os.kill(group.brokers[replica].pid, signal.SIGSTOP)  # type: ignore[union-attr]
        assert wait_until(lambda: group.replica_info()[3].members == {master_id}, UNTIL_S)
        group.kill(master)
        os.kill(group.brokers[replica].pid, signal.SIGCONT)  # type: ignore[union-attr]
        replica_id = ({1, 2} - {master_id}).pop()
        elect = {"clusterName": "DefaultCluster", "brokerName": GROUP, "brokerId": str(replica_id)}
        elect["designateElect"] = "true"

        def refused() -> bool:
            answer = ask(group.namesrv.address, RequestCode.CONTROLLER_ELECT_MASTER, elect)  # type: ignore[union-attr]
            return answer.code == ResponseCode.CONTROLLER_ELECT_MASTER_FAILED

        def replica_alive() -> bool:
            answer = ask(group.namesrv.address, RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, {}, f'["{GROUP}"]'.encode())  # type: ignore[union-attr]
            info = BrokerReplicasInfo.decode(answer.body).replicas_info_table[GROUP]
            return any(r.broker_id == replica_id and r.alive for r in info.not_in_sync_replicas)

        assert wait_until(replica_alive, UNTIL_S)
        assert wait_until(refused, UNTIL_S)
        assert group.replica_info()[0] is None
        group.start_broker(master)
        assert wait_until(group.all_in_sync, UNTIL_S)
        assert group.replica_info()[0] == master_id and group.replica_info()[2] == epoch + 1


def admin(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparkmq", "admin", *args],
        capture_output=True,
        text=True,
        timeout=UNTIL_S,
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[3])),
    )


def test_admin_commands_show_the_group_and_elect_a_designated_replica(group: ControllerGroup) -> None:
    assert group.namesrv is not None
    namesrv = group.namesrv.address
    master_id, master_address, epoch, sync = group.replica_info()

    meta = admin("getControllerMetaData", "-a", namesrv)
    assert meta.returncode == 0, meta.stderr
    assert f"#ControllerLeaderAddress\t{namesrv}" in meta.stdout and "#Peer:\tn0-" in meta.stdout

    states = admin("getSyncStateSet", "-a", namesrv, "-b", GROUP)
    assert states.returncode == 0, states.stderr
    assert f"#MasterBrokerId\t{master_id}\n#MasterAddr\t{master_address}\n#MasterEpoch\t{epoch}\n" in states.stdout
    assert states.stdout.count("InSyncReplica:\tReplicaIdentity{brokerName='broker-ctl'") == 3
    assert "alive=true}" in states.stdout

    epochs = admin("getBrokerEpoch", "-n", namesrv, "-b", GROUP)
    assert epochs.returncode == 0, epochs.stderr
    assert epochs.stdout.count(f"#Epoch: EpochEntry{{epoch={epoch}, startOffset=0, endOffset=") == 3

    other = min(sync.members - {master_id})
    elected = admin("electMaster", "-a", namesrv, "-b", str(other), "-bn", GROUP, "-c", "DefaultCluster")
    assert elected.returncode == 0, elected.stderr
    assert f"#MasterEpoch\t{epoch + 1}" in elected.stdout
    assert wait_until(lambda: group.replica_info()[0] == other and group.all_in_sync(), UNTIL_S)

    absent = admin("electMaster", "-a", namesrv, "-b", "9", "-bn", GROUP, "-c", "DefaultCluster")
    assert absent.returncode == 1 and "CONTROLLER_ELECT_MASTER_FAILED" not in absent.stdout
    assert "no replica of broker-ctl can be elected" in absent.stderr


def test_the_cpp_producer_finds_the_new_master_by_itself(group: ControllerGroup, tmp_path: Path) -> None:
    """The real C++ producer (rocketmq-client-cpp) sends through a SIGKILL of the master: its failed
    sends are reported, and once it polls the NameServer again (every 30 s) it sends to the new
    master; every message it was told SEND_OK is readable."""
    assert group.namesrv is not None
    namesrv, topic = group.namesrv.address, "CtlCpp"
    producer = CppClientRun.start(
        tmp_path / "home", "produce-through", "--namesrv", namesrv, "--topic", topic, "--group", "PID_CPP",
        "--count", "400", "--deadline", "150",
    )  # fmt: skip
    try:
        producer.wait_for(lambda run: len(run.events("sent")) >= 100, UNTIL_S, "100 sends before the kill")
        old = group.master_index()
        assert old is not None
        group.kill(old)
        records = producer.finish(180.0)
    finally:
        producer.kill()
    acknowledged = {r["index"] for r in records if r.get("event") == "sent" and r["status"] == 0}
    failed = [r for r in records if r.get("event") == "failed"]
    assert len(acknowledged) == 400, failed[-3:]
    bodies = {b"m-body-%d" % i for i in acknowledged}
    assert bodies <= read_all(namesrv, topic, bodies)


def test_a_standalone_controller_serves_a_group_and_keeps_its_epochs_across_a_restart(tmp_path: Path) -> None:
    """``sparkmq controller`` beside a plain NameServer; restarted, it still knows the group's epoch."""
    store = tmp_path / "controller"
    with NamesrvProcess.start() as namesrv:
        controller = ServiceProcess.launch(
            ["controller", "--port", "0", "--store-dir", str(store)], "controller listening on"
        )
        address = controller.ready_line.rsplit(" ", 1)[-1]
        settings = dict(FAST, enableControllerMode="true", controllerAddr=address)
        pairs = [a for k, v in settings.items() for a in ("--set", f"{k}={v}")]
        try:
            with BrokerProcess.start(tmp_path / "broker", namesrv.address, *pairs) as broker:
                assert wait_until(lambda: route_master(namesrv.address, "TBW102") == broker.address, UNTIL_S)
                info = ask(address, RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": GROUP})
                assert info.ext_fields["masterAddress"] == broker.address and info.ext_fields["masterEpoch"] == "1"
                controller.stop()
                controller = ServiceProcess.launch(
                    ["controller", "--port", address.rsplit(":", 1)[1], "--store-dir", str(store)],
                    "controller listening on",
                )
                again = ask(address, RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": GROUP})
                assert again.ext_fields["masterEpoch"] == "1" and again.ext_fields["masterBrokerId"] == "1"
        finally:
            controller.stop()


def test_a_sync_state_set_smaller_than_min_in_sync_replicas_refuses_sends(tmp_path: Path) -> None:
    """``minInSyncReplicas=2``: with its only replica gone from the SyncStateSet the master stores
    nothing and answers SYSTEM_ERROR "in-sync replicas not enough" (Java's IN_SYNC_REPLICAS_NOT_ENOUGH);
    once the replica is back in the set, sends succeed again."""
    topic = "CtlMinIsr"
    with ControllerGroup(tmp_path, 2, extra=("--set", "minInSyncReplicas=2")) as group:
        assert wait_until(group.all_in_sync, UNTIL_S), "the group never had both brokers in sync"
        master = group.master_index()
        assert master is not None
        broker = group.brokers[master]
        assert broker is not None
        address = broker.address
        request = send_request(topic, b"both in sync")
        assert ask(address, RequestCode.SEND_MESSAGE_V2, request.ext_fields, request.body).code == ResponseCode.SUCCESS
        replica = 1 - master
        group.kill(replica)
        assert wait_until(lambda: len(group.replica_info()[3].members) == 1, UNTIL_S), "the replica never left"
        end = group.max_offset(master)
        refused = send_request(topic, b"one in sync")
        answer = ask(address, RequestCode.SEND_MESSAGE_V2, refused.ext_fields, refused.body)
        assert answer.code == ResponseCode.SYSTEM_ERROR and "in-sync replicas not enough" in (answer.remark or "")
        assert group.max_offset(master) == end  # nothing stored
        group.start_broker(replica)
        assert wait_until(group.all_in_sync, UNTIL_S), "the replica never rejoined"
        again = send_request(topic, b"both in sync again")
        assert ask(address, RequestCode.SEND_MESSAGE_V2, again.ext_fields, again.body).code == ResponseCode.SUCCESS
