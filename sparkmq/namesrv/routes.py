"""RouteInfoManager: the NameServer's route tables (Java 4.9.7 ``RouteInfoManager``), pure.

Four tables, as in Java:

* topic → {broker name → :class:`QueueData`} (``topicQueueTable``);
* broker name → cluster + {broker id → ``ip:port``} (``brokerAddrTable``; id 0 = master);
* cluster → broker names (``clusterAddrTable``);
* broker address → :class:`BrokerLiveInfo` (``brokerLiveTable``): last registration time,
  the topic table's :class:`DataVersion`, the connection it registered on, its HA address.

No I/O and no locks: it lives inside one asyncio event loop and is **not thread-safe by
design** (Java guards the same tables with a read/write lock because Netty calls it from many
threads; here every caller runs on the loop). Connections are opaque handles of type ``C``,
compared by identity; closing them is the caller's job (see :meth:`evict_stale`). Time comes
from an injected millisecond clock, so expiry is testable without sleeping.

Registration only adds or updates a topic's queue data, it never removes topics missing from
the registration: a Java broker's incremental registration (``registerIncrementBrokerData``)
carries just the changed topic. Topics go away through :meth:`delete_topic` or when their last
broker goes away.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from sparkmq.message.names import MASTER_ID
from sparkmq.protocol import PermName
from sparkmq.protocol.bodies import BrokerData, QueueData, TopicRouteData
from sparkmq.protocol.namesrv_bodies import ClusterInfo, DataVersion, TopicConfig, TopicConfigSerializeWrapper

C = TypeVar("C")

#: ``BROKER_CHANNEL_EXPIRED_TIME``: a broker silent this long is evicted (it re-registers every 30 s).
BROKER_CHANNEL_EXPIRED_MS = 120_000


def monotonic_ms() -> int:
    """The default clock: monotonic milliseconds (expiry must not jump with wall time)."""
    return time.monotonic_ns() // 1_000_000


@dataclass(slots=True)
class BrokerLiveInfo(Generic[C]):
    """One registered broker address: when it last registered, its data version, its connection."""

    last_update_ms: int
    data_version: DataVersion
    channel: C | None
    ha_server_addr: str


@dataclass(frozen=True, slots=True)
class RegisterBrokerResult:
    """What REGISTER_BROKER answers: a slave learns its master's address and HA address."""

    ha_server_addr: str | None = None
    master_addr: str | None = None


@dataclass(slots=True)
class _BrokerGroup:
    cluster: str
    broker_name: str
    addrs: dict[int, str]

    def snapshot(self) -> BrokerData:
        return BrokerData(self.cluster, self.broker_name, dict(self.addrs))


class RouteInfoManager(Generic[C]):
    """Route tables of one NameServer; ``C`` is the connection type (opaque here).

    Example::

        >>> routes: RouteInfoManager[object] = RouteInfoManager(clock=lambda: 0)
        >>> wrapper = TopicConfigSerializeWrapper({"T": TopicConfig("T", 4, 4)}, DataVersion(1, 1))
        >>> routes.register_broker("DefaultCluster", "127.0.0.1:10911", "broker-a", 0,
        ...                        "127.0.0.1:10912", wrapper, channel=None)
        RegisterBrokerResult(ha_server_addr=None, master_addr=None)
        >>> routes.topic_route("T").encode()[:54]
        b'{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:10911"}'
        >>> routes.topic_route("nope") is None
        True
    """

    def __init__(
        self, *, broker_channel_expired_ms: int = BROKER_CHANNEL_EXPIRED_MS, clock: Callable[[], int] = monotonic_ms
    ) -> None:
        self.broker_channel_expired_ms = broker_channel_expired_ms
        self._clock = clock
        self._topic_queue_table: dict[str, dict[str, QueueData]] = {}
        self._broker_addr_table: dict[str, _BrokerGroup] = {}
        self._cluster_addr_table: dict[str, set[str]] = {}
        self._broker_live_table: dict[str, BrokerLiveInfo[C]] = {}

    # -- registration --------------------------------------------------------------------------
    def register_broker(
        self,
        cluster_name: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        topic_config_wrapper: TopicConfigSerializeWrapper | None,
        channel: C | None,
    ) -> RegisterBrokerResult:
        """Record (or refresh) a broker and, for a master, its topics (``registerBroker``).

        A master's topics are (re)read on its first registration and whenever its
        :class:`DataVersion` changed; otherwise the call only refreshes the live entry.
        """
        self._cluster_addr_table.setdefault(cluster_name, set()).add(broker_name)
        group = self._broker_addr_table.get(broker_name)
        register_first = group is None
        if group is None:
            group = self._broker_addr_table[broker_name] = _BrokerGroup(cluster_name, broker_name, {})
        # The same address under another id (a slave switched to master) is replaced.
        for other_id in [i for i, addr in group.addrs.items() if addr == broker_addr and i != broker_id]:
            del group.addrs[other_id]
        register_first = group.addrs.get(broker_id) is None or register_first
        group.addrs[broker_id] = broker_addr

        data_version = DataVersion() if topic_config_wrapper is None else topic_config_wrapper.data_version
        if (
            topic_config_wrapper is not None
            and broker_id == MASTER_ID
            and (register_first or self._data_version_changed(broker_addr, data_version))
        ):
            for config in topic_config_wrapper.topic_config_table.values():
                self._create_and_update_queue_data(broker_name, config)
        self._broker_live_table[broker_addr] = BrokerLiveInfo(self._clock(), data_version, channel, ha_server_addr)

        if broker_id == MASTER_ID:
            return RegisterBrokerResult()
        master_addr = group.addrs.get(MASTER_ID)
        master = None if master_addr is None else self._broker_live_table.get(master_addr)
        if master_addr is None or master is None:
            return RegisterBrokerResult()
        return RegisterBrokerResult(ha_server_addr=master.ha_server_addr, master_addr=master_addr)

    def _data_version_changed(self, broker_addr: str, data_version: DataVersion) -> bool:
        previous = self._broker_live_table.get(broker_addr)
        return previous is None or previous.data_version != data_version

    def _create_and_update_queue_data(self, broker_name: str, config: TopicConfig) -> None:
        queue_data = QueueData(
            broker_name, config.read_queue_nums, config.write_queue_nums, config.perm, config.topic_sys_flag
        )
        self._topic_queue_table.setdefault(config.topic_name, {})[broker_name] = queue_data

    def unregister_broker(self, cluster_name: str, broker_addr: str, broker_name: str, broker_id: int) -> None:
        """Forget one broker id (``unregisterBroker``); its topics go once no id of its name is left."""
        self._broker_live_table.pop(broker_addr, None)
        group = self._broker_addr_table.get(broker_name)
        if group is None:
            return
        group.addrs.pop(broker_id, None)
        if not group.addrs:
            del self._broker_addr_table[broker_name]
            self._remove_broker_names({broker_name}, cluster_name)

    def registration_conflict(
        self, broker_addr: str, broker_name: str, broker_id: int, channel: C | None
    ) -> str | None:
        """Why ``channel`` may not register or unregister this broker, or None if it may.

        A broker id (and an address) registered from another connection that is still open and
        not expired belongs to that connection: anyone else would take over or drop its routes.
        A restarted broker registers again once its old connection closed (the server evicts it
        at once) or its registration expired. A replica of the group registered from ``channel``
        may take the master's id (a controller promoted it while the old master is cut off).
        """
        group = self._broker_addr_table.get(broker_name)
        slot_addr = None if group is None else group.addrs.get(broker_id)
        if broker_id == MASTER_ID and group is not None and self._member_on(group, broker_addr, channel):
            slot_addr = None
        for addr, what in (
            (slot_addr, f"broker {broker_name} id {broker_id}"),
            (broker_addr, f"address {broker_addr}"),
        ):
            live = None if addr is None else self._broker_live_table.get(addr)
            if (
                live is not None
                and live.channel is not None
                and live.channel is not channel
                and not self._expired(live)
            ):
                return (
                    f"{what} is registered as {addr} from another live connection; it can register again "
                    f"once that connection closes or its registration expires "
                    f"({self.broker_channel_expired_ms} ms after its last one)"
                )
        return None

    def _member_on(self, group: _BrokerGroup, broker_addr: str, channel: C | None) -> bool:
        """``broker_addr`` holds a replica id of ``group``, registered from ``channel``."""
        live = self._broker_live_table.get(broker_addr)
        return (
            channel is not None
            and live is not None
            and live.channel is channel
            and any(addr == broker_addr for i, addr in group.addrs.items() if i != MASTER_ID)
        )

    def _expired(self, info: BrokerLiveInfo[C]) -> bool:
        return info.last_update_ms < self._clock() - self.broker_channel_expired_ms

    # -- eviction ------------------------------------------------------------------------------
    def evict_stale(self) -> list[tuple[str, BrokerLiveInfo[C]]]:
        """Drop brokers silent for more than ``broker_channel_expired_ms`` (``scanNotActiveBroker``).

        Returns ``(address, live info)`` of each evicted broker; the caller closes
        ``info.channel`` as Java does.
        """
        stale = [(addr, info) for addr, info in self._broker_live_table.items() if self._expired(info)]
        for addr, _info in stale:
            self._remove_broker_addr(addr)
        return stale

    def channel_closed(self, channel: C) -> list[str]:
        """Drop every broker registered on ``channel`` at once (``onChannelDestroy``).

        Returns the broker addresses removed (empty if the connection was not a broker's).
        Unlike Java, an unknown channel is not looked up by its remote address: that is an
        ephemeral client port and never matches a broker's listen address.
        """
        addrs = [addr for addr, info in self._broker_live_table.items() if info.channel is channel]
        for addr in addrs:
            self._remove_broker_addr(addr)
        return addrs

    def _remove_broker_addr(self, broker_addr: str) -> None:
        self._broker_live_table.pop(broker_addr, None)
        emptied: set[str] = set()
        for name, group in list(self._broker_addr_table.items()):
            for broker_id in [i for i, addr in group.addrs.items() if addr == broker_addr]:
                del group.addrs[broker_id]
            if not group.addrs:
                del self._broker_addr_table[name]
                emptied.add(name)
        if emptied:
            self._remove_broker_names(emptied, None)

    def _remove_broker_names(self, names: set[str], cluster_name: str | None) -> None:
        clusters = list(self._cluster_addr_table) if cluster_name is None else [cluster_name]
        for cluster in clusters:
            members = self._cluster_addr_table.get(cluster)
            if members is None:
                continue
            members -= names
            if not members:
                del self._cluster_addr_table[cluster]
        for topic, queues in list(self._topic_queue_table.items()):
            for name in names:
                queues.pop(name, None)
            if not queues:
                del self._topic_queue_table[topic]

    # -- queries -------------------------------------------------------------------------------
    def topic_route(self, topic: str) -> TopicRouteData | None:
        """The route of ``topic``, or None when it has no queue data or none of its brokers is known.

        Queue and broker datas are sorted by broker name (Java's HashMap order is arbitrary).
        """
        queues = self._topic_queue_table.get(topic)
        if not queues:
            return None
        names = sorted(queues)
        brokers = tuple(self._broker_addr_table[n].snapshot() for n in names if n in self._broker_addr_table)
        if not brokers:
            return None
        return TopicRouteData(queue_datas=tuple(queues[n] for n in names), broker_datas=brokers)

    def cluster_info(self) -> ClusterInfo:
        """Every broker group and every cluster's broker names (GET_BROKER_CLUSTER_INFO)."""
        brokers = {name: group.snapshot() for name, group in self._broker_addr_table.items()}
        clusters = {name: tuple(sorted(members)) for name, members in self._cluster_addr_table.items()}
        return ClusterInfo(brokers, clusters)

    def all_topics(self) -> tuple[str, ...]:
        """Every topic with queue data, sorted."""
        return tuple(sorted(self._topic_queue_table))

    def set_write_perm(self, broker_name: str, writable: bool) -> int:
        """WIPE/ADD_WRITE_PERM_OF_BROKER: clear or set PERM_WRITE on every queue data of ``broker_name``.

        Returns how many topics changed. The broker's next registration brings its own perms back (as in Java 4.x).
        """
        changed = 0
        for queues in self._topic_queue_table.values():
            data = queues.get(broker_name)
            if data is None:
                continue
            perm = data.perm | PermName.PERM_WRITE if writable else data.perm & ~PermName.PERM_WRITE
            if perm != data.perm:
                queues[broker_name] = dataclasses.replace(data, perm=perm)
                changed += 1
        return changed

    def delete_topic(self, topic: str, cluster_name: str | None = None) -> bool:
        """Forget ``topic``; with ``cluster_name``, only that cluster's queues of it. True if known."""
        queues = self._topic_queue_table.get(topic)
        if queues is None:
            return False
        if cluster_name is None:
            del self._topic_queue_table[topic]
            return True
        for name in self._cluster_addr_table.get(cluster_name, set()):
            queues.pop(name, None)
        if not queues:
            del self._topic_queue_table[topic]
        return True

    def live_broker(self, broker_addr: str) -> BrokerLiveInfo[C] | None:
        """The live entry of ``broker_addr``, or None if it is not registered."""
        return self._broker_live_table.get(broker_addr)

    @property
    def live_broker_addrs(self) -> tuple[str, ...]:
        """Addresses of every registered broker, sorted."""
        return tuple(sorted(self._broker_live_table))


__all__ = [
    "BROKER_CHANNEL_EXPIRED_MS",
    "MASTER_ID",
    "BrokerLiveInfo",
    "RegisterBrokerResult",
    "RouteInfoManager",
    "monotonic_ms",
]
