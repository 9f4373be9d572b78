"""AdminExt: the remoting calls behind mqadmin and the dashboard (Java ``DefaultMQAdminExt``), asyncio-native.

Every call talks to the NameServer or a broker over the remoting protocol with the request codes,
headers and bodies Java's admin sends, and raises the error tree's exceptions (``RemoteError``
with the response code and remark, ``TopicNotExistError``) for anything but SUCCESS.

>>> # async with AdminExt("127.0.0.1:9876") as admin:
>>> #     info = await admin.cluster_info()
>>> #     table = await admin.runtime_info(info.broker_addr_table["broker-a"].broker_addrs[0])
"""

from __future__ import annotations

from typing import Any, Self

from sparkmq.client.instance import ClientInstance
from sparkmq.client.message import ReceivedMessage, decode_pull_body
from sparkmq.client.responses import check_response
from sparkmq.errors import RemoteError, SparkmqError
from sparkmq.message.msgid import decode_offset_msg_id
from sparkmq.message.names import AUTO_CREATE_TOPIC_KEY
from sparkmq.protocol import PullSysFlag, RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.admin_bodies import ConsumerConnection, ConsumeStats, ResetOffsetBody, TopicStatsTable
from sparkmq.protocol.admin_headers import (
    BrokerNameRequestHeader,
    CreateTopicRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    GetConsumeStatsRequestHeader,
    TopicRequestHeader,
    WritePermResponseHeader,
)
from sparkmq.protocol.bodies import MessageQueue, TopicList, TopicRouteData
from sparkmq.protocol.fastjson import as_object, as_str_list, loads
from sparkmq.protocol.headers import (
    ConsumerGroupRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    QueryMessageRequestHeader,
    ResetOffsetRequestHeader,
    ViewMessageRequestHeader,
)
from sparkmq.protocol.namesrv_bodies import ClusterInfo, KVTable, TopicConfig
from sparkmq.protocol.ops_bodies import (
    BrokerStatsData,
    DeleteSubscriptionGroupRequestHeader,
    ProducerConnection,
    ProducerGroupRequestHeader,
    SubscriptionGroupBody,
    ViewBrokerStatsDataRequestHeader,
    parse_properties_text,
    properties_text,
)
from sparkmq.protocol.running_info import ConsumerRunningInfo
from sparkmq.protocol.table_bodies import TableStatusBody

ADMIN_TIMEOUT_S = 5.0
QUERY_MAX_NUM = 64
END_OF_TIME_MS = 2**62
ADMIN_GROUP = "TOOLS_CONSUMER"  # the group mqadmin's pulls are made under (MixAll.TOOLS_CONSUMER_GROUP)


class AdminExt:
    """mqadmin's calls against one NameServer list."""

    def __init__(self, namesrv_addr: str, **client_options: Any) -> None:
        """``client_options`` go to ``ClientInstance`` and the producers made here (e.g. ACL ``security=``)."""
        self.client_options = client_options
        self.instance = ClientInstance(namesrv_addr, instance_name="admin", **client_options)
        self.remoting = self.instance.remoting

    async def close(self) -> None:
        await self.remoting.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- plumbing --------------------------------------------------------------------------
    async def namesrv(self, code: int, fields: dict[str, str] | None = None, what: str = "") -> RemotingCommand:
        """Ask the NameServers in turn; the first answer (checked) wins."""
        last: SparkmqError | None = None
        for address in self.instance.namesrv_addresses:
            try:
                response = await self.remoting.invoke(address, code, fields or {}, timeout=ADMIN_TIMEOUT_S)
            except SparkmqError as exc:
                last = exc
                continue
            return check_response(response, what or f"NameServer {address}")
        assert last is not None
        raise RemoteError(f"no NameServer answered ({last.remark})", retriable=True) from last

    async def broker(
        self, address: str, code: int, fields: dict[str, str] | None = None, body: bytes = b"", what: str = ""
    ) -> RemotingCommand:
        response = await self.remoting.invoke(address, code, fields or {}, body, ADMIN_TIMEOUT_S)
        return check_response(response, what or f"broker {address}")

    # -- NameServer ------------------------------------------------------------------------
    async def cluster_info(self) -> ClusterInfo:
        return ClusterInfo.decode((await self.namesrv(RequestCode.GET_BROKER_CLUSTER_INFO, what="cluster info")).body)

    async def topic_list(self) -> list[str]:
        body = (await self.namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, what="topic list")).body
        return sorted(TopicList.decode(body).topic_list)

    async def topic_route(self, topic: str) -> TopicRouteData:
        return (await self.instance.route(topic, refresh=True)).data

    async def master_addrs(self, cluster: str | None = None) -> dict[str, str]:
        """Broker name → master address, of one cluster or of all."""
        info = await self.cluster_info()
        names = info.cluster_addr_table.get(cluster, ()) if cluster else info.broker_addr_table.keys()
        if cluster and cluster not in info.cluster_addr_table:
            raise RemoteError(f"cluster {cluster} is not known to the NameServer")
        return {
            n: info.broker_addr_table[n].broker_addrs[0]
            for n in sorted(names)
            if n in info.broker_addr_table and 0 in info.broker_addr_table[n].broker_addrs
        }

    async def write_perm(self, broker_name: str, add: bool) -> dict[str, int]:
        """WIPE/ADD_WRITE_PERM_OF_BROKER on every NameServer: address → topics changed."""
        code = RequestCode.ADD_WRITE_PERM_OF_BROKER if add else RequestCode.WIPE_WRITE_PERM_OF_BROKER
        counts = {}
        for address in self.instance.namesrv_addresses:
            response = await self.remoting.invoke(
                address, code, BrokerNameRequestHeader(broker_name).to_fields(), timeout=ADMIN_TIMEOUT_S
            )
            h = WritePermResponseHeader.from_fields(check_response(response, f"write perm on {address}").ext_fields)
            counts[address] = (h.add_topic_count if add else h.wipe_topic_count) or 0
        return counts

    async def delete_topic_in_namesrv(self, topic: str, cluster: str | None) -> None:
        for address in self.instance.namesrv_addresses:
            fields = DeleteTopicFromNamesrvRequestHeader(topic, cluster).to_fields()
            check_response(
                await self.remoting.invoke(
                    address, RequestCode.DELETE_TOPIC_IN_NAMESRV, fields, timeout=ADMIN_TIMEOUT_S
                ),
                f"delete {topic} on {address}",
            )

    # -- brokers: topics and groups --------------------------------------------------------
    async def create_topic(self, address: str, config: TopicConfig, attributes: str | None = None) -> None:
        """UPDATE_AND_CREATE_TOPIC; ``attributes``: RocketMQ 5's ``+key=value,-key`` modification."""
        fields = CreateTopicRequestHeader(
            config.topic_name,
            AUTO_CREATE_TOPIC_KEY,
            config.read_queue_nums,
            config.write_queue_nums,
            config.perm,
            "SINGLE_TAG",
            config.order,
            config.topic_sys_flag,
            attributes,
        ).to_fields()
        await self.broker(
            address, RequestCode.UPDATE_AND_CREATE_TOPIC, fields, what=f"create topic {config.topic_name}"
        )

    async def delete_topic_in_broker(self, address: str, topic: str) -> None:
        await self.broker(
            address,
            RequestCode.DELETE_TOPIC_IN_BROKER,
            TopicRequestHeader(topic).to_fields(),
            what=f"delete topic {topic}",
        )

    async def create_group(self, address: str, group: SubscriptionGroupBody) -> None:
        await self.broker(
            address,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
            body=group.encode(),
            what=f"create group {group.group_name}",
        )

    async def delete_group(self, address: str, group: str, clean_offset: bool = False) -> None:
        await self.broker(
            address,
            RequestCode.DELETE_SUBSCRIPTIONGROUP,
            DeleteSubscriptionGroupRequestHeader(group, clean_offset or None).to_fields(),
            what=f"delete group {group}",
        )

    async def topic_stats(self, topic: str) -> TopicStatsTable:
        route = await self.topic_route(topic)
        table = {}
        for b in route.broker_datas:
            if 0 in b.broker_addrs:
                body = (
                    await self.broker(
                        b.broker_addrs[0],
                        RequestCode.GET_TOPIC_STATS_INFO,
                        TopicRequestHeader(topic).to_fields(),
                        what=f"stats of {topic}",
                    )
                ).body
                table.update(TopicStatsTable.decode(body).offset_table)
        return TopicStatsTable(table)

    async def table_statuses(self, topic: str, address: str | None = None) -> dict[str, TableStatusBody]:
        """SPARKMQ_TABLE_STATUS of ``topic`` on ``address``, or on each master the topic is routed to: name → status."""
        if address is not None:
            targets = {address: address}
        else:
            route = await self.topic_route(topic)
            targets = {b.broker_name: b.broker_addrs[0] for b in route.broker_datas if 0 in b.broker_addrs}
        statuses = {}
        for name, target in targets.items():
            response = await self.broker(
                target,
                RequestCode.SPARKMQ_TABLE_STATUS,
                TopicRequestHeader(topic).to_fields(),
                what=f"table of {topic}",
            )
            statuses[name] = TableStatusBody.decode(response.body)
        return statuses

    async def group_names(self) -> set[str]:
        """Every subscription group a master holds (GET_ALL_SUBSCRIPTIONGROUP_CONFIG): 4.x and POP groups alike."""
        names: set[str] = set()
        for address in (await self.master_addrs()).values():
            body = (await self.broker(address, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, what="groups")).body
            table = as_object(loads(body, what="SubscriptionGroupWrapper"), "SubscriptionGroupWrapper")
            names.update(as_object(table.get("subscriptionGroupTable") or {}, "subscriptionGroupTable"))
        return names

    async def consume_stats(self, group: str, topic: str | None = None) -> ConsumeStats:
        """The group's offsets on every master broker that has some (merged), and its consume TPS."""
        table, tps = {}, 0.0
        for address in (await self.master_addrs()).values():
            body = (
                await self.broker(
                    address,
                    RequestCode.GET_CONSUME_STATS,
                    GetConsumeStatsRequestHeader(group, topic).to_fields(),
                    what=f"consume stats of {group}",
                )
            ).body
            stats = ConsumeStats.decode(body)
            table.update(stats.offset_table)
            tps += stats.consume_tps
        return ConsumeStats(table, tps)

    async def consumed_by(self, topic: str) -> list[str]:
        """QUERY_TOPIC_CONSUME_BY_WHO on the topic's brokers: every group consuming it."""
        groups: set[str] = set()
        for b in (await self.topic_route(topic)).broker_datas:
            body = (
                await self.broker(
                    b.broker_addrs[0],
                    RequestCode.QUERY_TOPIC_CONSUME_BY_WHO,
                    TopicRequestHeader(topic).to_fields(),
                    what=f"groups of {topic}",
                )
            ).body
            groups.update(
                as_str_list(as_object(loads(body, what="GroupList"), "GroupList").get("groupList") or [], "groupList")
            )
        return sorted(groups)

    async def consumer_connection(self, group: str) -> ConsumerConnection:
        """The group's members as the first broker that knows them reports them."""
        last: SparkmqError | None = None
        for address in (await self.master_addrs()).values():
            try:
                body = (
                    await self.broker(
                        address,
                        RequestCode.GET_CONSUMER_CONNECTION_LIST,
                        ConsumerGroupRequestHeader(group).to_fields(),
                        what=f"consumers of {group}",
                    )
                ).body
                return ConsumerConnection.decode(body)
            except RemoteError as exc:
                last = exc
        raise last or RemoteError(f"no broker knows consumer group {group}")

    async def consumer_running_info(self, group: str, client_id: str) -> ConsumerRunningInfo:
        """One member's own report (GET_CONSUMER_RUNNING_INFO, passed on by a broker it is connected to)."""
        last: SparkmqError | None = None
        fields = GetConsumerRunningInfoRequestHeader(group, client_id).to_fields()
        for address in (await self.master_addrs()).values():
            try:
                response = await self.broker(
                    address, RequestCode.GET_CONSUMER_RUNNING_INFO, fields, what=f"running info of {client_id}"
                )
                return ConsumerRunningInfo.decode(response.body)
            except RemoteError as exc:
                last = exc
        raise last or RemoteError(f"no broker knows consumer {client_id} of {group}")

    async def queue_owners(self, group: str) -> dict[MessageQueue, str]:
        """Queue → the IP of the member holding it (mqadmin consumerProgress's "#Client IP");
        members that cannot say are left out, as mqadmin does."""
        owners: dict[MessageQueue, str] = {}
        try:
            members = (await self.consumer_connection(group)).connection_set
        except RemoteError:
            return owners
        for member in members:
            try:
                info = await self.consumer_running_info(group, member.client_id)
            except SparkmqError:
                continue
            owners.update((queue, member.client_id.split("@")[0]) for queue in info.mq_table)
        return owners

    async def producer_connection(self, group: str, topic: str) -> ProducerConnection:
        rows: dict[str, Any] = {}
        for b in (await self.topic_route(topic)).broker_datas:
            response = await self.remoting.invoke(
                b.broker_addrs.get(0, ""),
                RequestCode.GET_PRODUCER_CONNECTION_LIST,
                ProducerGroupRequestHeader(group).to_fields(),
                timeout=ADMIN_TIMEOUT_S,
            )
            if response.code == ResponseCode.SUCCESS:
                rows.update((c.client_id, c) for c in ProducerConnection.decode(response.body).connection_set)
        if not rows:
            raise RemoteError(f"the producer group[{group}] has no connection on the brokers of {topic}")
        return ProducerConnection(tuple(rows.values()))

    async def reset_offset_by_time(
        self, group: str, topic: str, timestamp: int, force: bool
    ) -> dict[MessageQueue, int]:
        table: dict[MessageQueue, int] = {}
        fields = ResetOffsetRequestHeader(topic, group, timestamp, force).to_fields()
        for b in (await self.topic_route(topic)).broker_datas:
            body = (
                await self.broker(
                    b.broker_addrs[0],
                    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                    fields,
                    what=f"reset {group} on {topic}",
                )
            ).body
            table.update(ResetOffsetBody.decode(body).offset_table)
        return table

    # -- brokers: config and statistics ----------------------------------------------------
    async def runtime_info(self, address: str) -> dict[str, str]:
        return dict(KVTable.decode((await self.broker(address, RequestCode.GET_BROKER_RUNTIME_INFO)).body).table)

    async def broker_config(self, address: str) -> dict[str, str]:
        return parse_properties_text((await self.broker(address, RequestCode.GET_BROKER_CONFIG)).body)

    async def update_broker_config(self, address: str, values: dict[str, str]) -> None:
        await self.broker(
            address,
            RequestCode.UPDATE_BROKER_CONFIG,
            body=properties_text(values).encode(),
            what="update broker config",
        )

    async def view_stats(self, address: str, name: str, key: str) -> BrokerStatsData:
        body = (
            await self.broker(
                address,
                RequestCode.VIEW_BROKER_STATS_DATA,
                ViewBrokerStatsDataRequestHeader(name, key).to_fields(),
                what=f"stats {name}",
            )
        ).body
        return BrokerStatsData.decode(body)

    # -- messages --------------------------------------------------------------------------
    async def query_by_key(
        self,
        topic: str,
        key: str,
        unique: bool = False,
        max_num: int = QUERY_MAX_NUM,
        begin_ms: int = 0,
        end_ms: int = END_OF_TIME_MS,
    ) -> list[ReceivedMessage]:
        fields = QueryMessageRequestHeader(topic, key, max_num, begin_ms, end_ms, True if unique else None).to_fields()
        found: list[ReceivedMessage] = []
        for b in (await self.topic_route(topic)).broker_datas:
            response = await self.remoting.invoke(
                b.broker_addrs[0], RequestCode.QUERY_MESSAGE, fields, timeout=ADMIN_TIMEOUT_S
            )
            if response.code != ResponseCode.QUERY_NOT_FOUND:
                found += decode_pull_body(check_response(response, f"query {topic} by key {key}").body, b.broker_name)
        if unique:
            return [m for m in found if m.msg_id == key]
        return sorted((m for m in found if key in m.keys), key=lambda m: m.store_timestamp)

    async def message_by_offset_id(self, offset_msg_id: str) -> ReceivedMessage:
        ip, port, offset = decode_offset_msg_id(offset_msg_id)
        body = (
            await self.broker(
                f"{ip}:{port}",
                RequestCode.VIEW_MESSAGE_BY_ID,
                ViewMessageRequestHeader(offset).to_fields(),
                what=f"message {offset_msg_id}",
            )
        ).body
        messages = decode_pull_body(body, "")
        if len(messages) != 1:
            raise RemoteError(f"the broker answered {len(messages)} messages for {offset_msg_id}")
        return messages[0]

    async def pull(
        self, queue: MessageQueue, offset: int, max_num: int, group: str = ADMIN_GROUP
    ) -> tuple[list[ReceivedMessage], int, int]:
        """Messages of one queue from ``offset`` (no long polling, nothing committed): (messages, next, max)."""
        header = PullMessageRequestHeader(
            group, queue.topic, queue.queue_id, offset, max_num, int(PullSysFlag.SUBSCRIPTION), 0, 0, 0, "*", "TAG"
        )
        route = await self.topic_route(queue.topic)
        address = next((b.broker_addrs.get(0) for b in route.broker_datas if b.broker_name == queue.broker_name), None)
        if address is None:
            raise RemoteError(f"no master of broker {queue.broker_name} serves {queue.topic}")
        response = await self.remoting.invoke(
            address, RequestCode.PULL_MESSAGE, header.to_fields(), timeout=ADMIN_TIMEOUT_S
        )
        if response.code not in (
            ResponseCode.SUCCESS,
            ResponseCode.PULL_NOT_FOUND,
            ResponseCode.PULL_OFFSET_MOVED,
            ResponseCode.PULL_RETRY_IMMEDIATELY,
        ):
            check_response(response, f"pull {queue} at {offset}")
        fields = PullMessageResponseHeader.from_fields(response.ext_fields)
        messages = decode_pull_body(response.body, queue.broker_name) if response.code == ResponseCode.SUCCESS else []
        return messages, fields.next_begin_offset, fields.max_offset
