"""One broker group in controller mode as real processes: a NameServer with the controller embedded
(or beside three ``sparkmq controller`` nodes replicating through Raft) and N ``sparkmq broker``
processes (``enableControllerMode=true``), with what tests and the failover bench ask of them (who
is master, kill it, restart it, compare CommitLogs)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from sparkmq import Message, Producer, PullConsumer
from sparkmq.errors import SparkmqError
from sparkmq.protocol import RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.controller_bodies import EpochEntryCache, SyncStateSet
from sparkmq.remoting import RemotingClient
from support.processes import BrokerProcess, NamesrvProcess, ServiceProcess, wait_until
from support.rocketmq_java import free_port

GROUP = "broker-ctl"
UNTIL_S = 60.0
# Fast periods so a test waits seconds, not RocketMQ's defaults (heartbeat timeout 10 s, sync 5 s).
FAST = {
    "brokerName": GROUP,
    "brokerRole": "SYNC_MASTER",
    "flushDiskType": "SYNC_FLUSH",
    "allAckInSyncStateSet": "true",
    "haSendHeartbeatInterval": "200",
    "registerNameServerPeriod": "1000",
    "slaveSynchronizeInterval": "200",
    "brokerHeartbeatInterval": "200",
    "controllerHeartBeatTimeoutMills": "2000",
    "syncBrokerMetadataPeriod": "500",
    "checkSyncStateSetPeriod": "200",
    "haMaxTimeSlaveNotCatchup": "3000",
    "syncFlushTimeout": "3000",
}


def ask(address: str, code: int, fields: dict[str, str] | None = None, body: bytes = b"") -> RemotingCommand:
    """One request over a fresh RemotingClient."""

    async def call() -> RemotingCommand:
        client = RemotingClient()
        try:
            return await client.invoke(address, code, fields or {}, body, timeout=5.0)
        finally:
            await client.close()

    return asyncio.run(call())


def commitlog_bytes(store_dir: Path, end: int) -> bytes:
    """The first ``end`` bytes of a store's CommitLog, read from its segment files."""
    data = bytearray()
    for segment in sorted((store_dir / "commitlog").iterdir()):
        if len(data) >= end:
            break
        data += segment.read_bytes()
    return bytes(data[:end])


def metadata(address: str) -> dict[str, str] | None:
    """CONTROLLER_GET_METADATA_INFO's fields, or None from a node that does not answer."""
    try:
        return ask(address, RequestCode.CONTROLLER_GET_METADATA_INFO).ext_fields
    except SparkmqError:
        return None


@dataclass
class ControllerNodes:
    """``size`` standalone controllers (``controllerDLegerPeers``), each on fixed ports so it restarts in place."""

    root: Path
    size: int = 3
    ports: list[tuple[int, int]] = field(default_factory=list)  # (controller, Raft)
    nodes: list[ServiceProcess | None] = field(default_factory=list)

    def start(self) -> ControllerNodes:
        self.ports = [(free_port(), free_port()) for _ in range(self.size)]
        self.nodes = [None] * self.size
        for i in range(self.size):
            self.start_node(i)
        return self

    @property
    def addresses(self) -> list[str]:
        return [f"127.0.0.1:{port}" for port, _raft in self.ports]

    def start_node(self, i: int) -> None:
        peers = ";".join(f"n{n}-127.0.0.1:{raft}" for n, (_port, raft) in enumerate(self.ports))
        args = ["controller", "--port", str(self.ports[i][0]), "--store-dir", str(self.root / f"controller{i}")]
        for setting in (
            f"controllerDLegerPeers={peers}",
            f"controllerDLegerSelfId=n{i}",
            "scanNotActiveBrokerInterval=200",
        ):
            args += ["--set", setting]
        self.nodes[i] = ServiceProcess.launch(args, "controller listening on")

    def live(self) -> list[int]:
        return [i for i, node in enumerate(self.nodes) if node is not None and node.process.poll() is None]

    def leader(self) -> int | None:
        """The node every live node names leader, once it says so itself and knows its address."""
        answers: dict[int, dict[str, str]] = {}
        for i in self.live():
            answer = metadata(self.addresses[i])
            if answer is None:
                return None
            answers[i] = answer
        named = {a.get("controllerLeaderAddress", "") for a in answers.values()}
        address = named.pop() if len(named) == 1 else ""
        i = self.addresses.index(address) if address in self.addresses else -1
        return i if i in answers and answers[i].get("isLeader") == "true" else None

    def kill(self, i: int) -> None:
        node = self.nodes[i]
        assert node is not None
        node.kill()
        self.nodes[i] = None

    def stop(self) -> None:
        for node in self.nodes:
            if node is not None:
                node.stop()


@dataclass
class ControllerGroup:
    """``namesrv`` (controller embedded, or ``controllers`` > 1 standalone nodes) + ``size`` brokers
    sharing ``brokerName``."""

    root: Path
    size: int = 3
    extra: tuple[str, ...] = ()
    controllers: int = 1
    namesrv: NamesrvProcess | None = None
    nodes: ControllerNodes | None = None
    brokers: list[BrokerProcess | None] = field(default_factory=list)

    def start(self) -> ControllerGroup:
        if self.controllers > 1:
            self.namesrv = NamesrvProcess.start()
            self.nodes = ControllerNodes(self.root, self.controllers).start()
        else:
            self.namesrv = NamesrvProcess.start(
                "--set",
                "enableControllerInNamesrv=true",
                "--set",
                "scanNotActiveBrokerInterval=200",
                "--controller-store-dir",
                str(self.root / "controller"),
            )
        self.brokers = [None] * self.size
        for i in range(self.size):
            self.start_broker(i)
        return self

    @property
    def controller_addresses(self) -> list[str]:
        assert self.namesrv is not None
        return [self.namesrv.address] if self.nodes is None else self.nodes.addresses

    def broker_args(self) -> tuple[str, ...]:
        settings = dict(FAST, enableControllerMode="true", controllerAddr=";".join(self.controller_addresses))
        pairs = [a for k, v in settings.items() for a in ("--set", f"{k}={v}")]
        return (*pairs, *self.extra)

    def store_dir(self, i: int) -> Path:
        return self.root / f"broker{i}"

    def start_broker(self, i: int, port: int = 0) -> BrokerProcess:
        assert self.namesrv is not None
        broker = BrokerProcess.start(self.store_dir(i), self.namesrv.address, *self.broker_args(), port=port)
        self.brokers[i] = broker
        return broker

    def stop(self) -> None:
        for broker in self.brokers:
            if broker is not None:
                broker.stop()
        if self.nodes is not None:
            self.nodes.stop()
        if self.namesrv is not None:
            self.namesrv.stop()

    def __enter__(self) -> ControllerGroup:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- what the controller says ---------------------------------------------------------
    def replica_info(self) -> tuple[int | None, str, int, SyncStateSet]:
        """(masterBrokerId, masterAddress, masterEpoch, SyncStateSet) from CONTROLLER_GET_REPLICA_INFO
        (asked of the controller leader)."""
        nobody = None, "", 0, SyncStateSet(frozenset(), 0)
        live = self.controller_addresses if self.nodes is None else [self.nodes.addresses[i] for i in self.nodes.live()]
        for address in live:
            try:
                response = ask(address, RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": GROUP})
            except SparkmqError:
                continue
            if response.code == ResponseCode.SUCCESS:
                break
        else:
            return nobody
        fields = response.ext_fields
        master = fields.get("masterBrokerId")
        return (
            int(master) if master else None,
            fields.get("masterAddress", ""),
            int(fields.get("masterEpoch", "0")),
            SyncStateSet.decode(response.body),
        )

    def index_of(self, address: str) -> int | None:
        for i, broker in enumerate(self.brokers):
            if broker is not None and broker.address == address and broker.process.poll() is None:
                return i
        return None

    def master_index(self) -> int | None:
        """The live broker the controller names master, once its SyncStateSet holds every live broker."""
        _master, address, _epoch, _sync = self.replica_info()
        return self.index_of(address)

    def live(self) -> list[int]:
        return [i for i, b in enumerate(self.brokers) if b is not None and b.process.poll() is None]

    def epoch_cache(self, i: int) -> EpochEntryCache | None:
        broker = self.brokers[i]
        assert broker is not None
        response = ask(broker.address, RequestCode.GET_BROKER_EPOCH_CACHE)
        return EpochEntryCache.decode(response.body) if response.code == ResponseCode.SUCCESS else None

    def max_offset(self, i: int) -> int:
        cache = self.epoch_cache(i)
        return -1 if cache is None else cache.max_offset

    def all_in_sync(self) -> bool:
        """Every live broker is in the SyncStateSet and holds the master's whole CommitLog."""
        master_id, address, _epoch, sync = self.replica_info()
        master = self.index_of(address)
        if master is None or master_id is None:
            return False
        live = self.live()
        if len(sync.members) != len(live):
            return False
        end = self.max_offset(master)
        return all(self.max_offset(i) == end for i in live)

    def kill(self, i: int) -> BrokerProcess:
        broker = self.brokers[i]
        assert broker is not None
        broker.kill()
        self.brokers[i] = None
        return broker


def send_until_ok(producer: Producer, topic: str, body: bytes) -> None:
    """Send until the producer is told SEND_OK (it refreshes its route after each failure)."""

    def attempt() -> bool:
        try:
            producer.send(Message(topic, body))
        except SparkmqError:
            return False
        return True

    assert wait_until(attempt, UNTIL_S, interval_s=0.01), "sends never succeeded again"


def read_all(namesrv: str, topic: str, wanted: set[bytes]) -> set[bytes]:
    """The topic's bodies, read from the start until ``wanted`` arrived (unacknowledged sends may be
    stored too, so a count would stop too early)."""
    got: set[bytes] = set()
    with PullConsumer("CID_CTL", namesrv) as consumer:
        queues = consumer.queues_of(topic)
        consumer.assign(queues)
        for queue in queues:
            consumer.seek(queue, 0)
        wait_until(lambda: got.update(m.body for m in consumer.poll(0.2)) or wanted <= got, UNTIL_S)
    return got


def assert_commitlogs_identical(group: ControllerGroup) -> int:
    end = group.max_offset(group.live()[0])
    logs = {i: commitlog_bytes(group.store_dir(i), end) for i in group.live()}
    assert all(len(log) == end for log in logs.values())
    assert len(set(logs.values())) == 1, "the replicas' CommitLogs differ"
    return end
