"""Request processors of the NameServer (Java 4.9.7 ``DefaultRequestProcessor``), one per code.

Each parses its extFields with the protocol's typed headers (a missing or malformed field
raises :class:`~sparkmq.errors.InvalidFieldError`, which the connection answers with
SYSTEM_ERROR and the remark) and answers what the real clients need:

* GET_ROUTEINFO_BY_TOPIC (105): SUCCESS + TopicRouteData JSON (numbers as JSON numbers,
  ``brokerAddrs`` keyed ``"0"``), or TOPIC_NOT_EXIST (17) with Java's remark, which is what
  sends the C++ client to its ``TBW102`` fallback.
* REGISTER_BROKER (103): ``haServerAddr``/``masterAddr`` as string extFields (left out for a
  master, as Java leaves them null) and an empty ``ORDER_TOPIC_CONFIG`` KVTable body.
* REGISTER_BROKER / UNREGISTER_BROKER for a broker id or address registered from another live
  connection: NO_PERMISSION (16) (Java lets anyone take over a broker's routes; sparkmq does
  unless ``guard_registrations`` is off).
* UNREGISTER_BROKER (104), GET_BROKER_CLUSTER_INFO (106),
  GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206), DELETE_TOPIC_IN_NAMESRV (216), WIPE_WRITE_PERM_OF_BROKER (205),
  ADD_WRITE_PERM_OF_BROKER (327).

Codes not registered here get REQUEST_CODE_NOT_SUPPORTED from the remoting server.
"""

from __future__ import annotations

import logging
import zlib

from sparkmq.protocol import MQVersion, RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.admin_headers import (
    BrokerNameRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    GetRouteInfoRequestHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
    WritePermResponseHeader,
)
from sparkmq.protocol.bodies import TopicList
from sparkmq.protocol.namesrv_bodies import KVTable, RegisterBrokerBody, TopicConfigSerializeWrapper
from sparkmq.remoting import Processor, RemotingConnection, RemotingServer

from .routes import RouteInfoManager

logger = logging.getLogger(__name__)

#: ``UtilAll.crc32``: Java masks the CRC32 to a non-negative int.
CRC32_MASK = 0x7FFFFFFF


def topic_not_exist_remark(topic: str) -> str:
    """Java's remark for an unknown topic (without its FAQ link)."""
    return f"No topic route info in name server for the topic: {topic}"


def body_crc32(body: bytes) -> int:
    """``UtilAll.crc32(body)``: what a broker puts in ``bodyCrc32`` (the sign bit cleared).

    >>> import zlib; zlib.crc32(b"{}"), body_crc32(b"{}")
    (2745614147, 598130499)
    """
    return zlib.crc32(body) & CRC32_MASK


class NamesrvProcessors:
    """The NameServer's request processors over one :class:`RouteInfoManager`.

    Example::

        >>> routes: RouteInfoManager[RemotingConnection] = RouteInfoManager()
        >>> processors = NamesrvProcessors(routes)
        >>> sorted(int(code) for code in processors.table())
        [103, 104, 105, 106, 205, 206, 216, 327]

    ``processors.register_with(remoting_server)`` installs them; call it before the server starts.
    """

    def __init__(self, routes: RouteInfoManager[RemotingConnection], *, guard_registrations: bool = True) -> None:
        self._routes = routes
        self._guard = guard_registrations

    def _refusal(
        self,
        request: RemotingCommand,
        connection: RemotingConnection,
        what: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
    ) -> RemotingCommand | None:
        conflict = (
            self._routes.registration_conflict(broker_addr, broker_name, broker_id, connection) if self._guard else None
        )
        if conflict is None:
            return None
        logger.warning("%s from %s:%d refused: %s", what, *connection.peer, conflict)
        return request.make_response(ResponseCode.NO_PERMISSION, remark=f"{what} refused: {conflict}")

    def table(self) -> dict[RequestCode, Processor]:
        """Request code → processor (bound coroutine methods)."""
        return {
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route_info_by_topic,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.get_broker_cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_all_topic_list,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic_in_namesrv,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self.wipe_write_perm,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: self.add_write_perm,
        }

    def register_with(self, server: RemotingServer) -> None:
        """Register every processor of :meth:`table` on ``server``."""
        for code, processor in self.table().items():
            server.register(code, processor)

    async def register_broker(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        """REGISTER_BROKER (103): ``registerBrokerWithFilterServer`` (or the pre-V3_0_11 form)."""
        header = RegisterBrokerRequestHeader.from_fields(request.ext_fields)
        if header.body_crc32 != 0 and body_crc32(request.body) != header.body_crc32:
            logger.warning(
                "REGISTER_BROKER from %s (%s): body crc32 %d does not match header %d",
                header.broker_addr,
                header.broker_name,
                body_crc32(request.body),
                header.body_crc32,
            )
            return request.make_response(ResponseCode.SYSTEM_ERROR, remark="crc32 not match")
        refusal = self._refusal(
            request, connection, "REGISTER_BROKER", header.broker_addr, header.broker_name, header.broker_id
        )
        if refusal is not None:
            return refusal
        wrapper = _topic_config_wrapper(request, header.compressed)
        result = self._routes.register_broker(
            header.cluster_name,
            header.broker_addr,
            header.broker_name,
            header.broker_id,
            header.ha_server_addr,
            wrapper,
            connection,
        )
        logger.debug(
            "broker %s id %d (%s) registered %d topics from %s:%d",
            header.broker_name,
            header.broker_id,
            header.broker_addr,
            len(wrapper.topic_config_table),
            *connection.peer,
        )
        fields = RegisterBrokerResponseHeader(result.ha_server_addr, result.master_addr).to_fields()
        return request.make_response(ext_fields=fields, body=KVTable().encode())

    async def unregister_broker(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        """UNREGISTER_BROKER (104): forget one broker id; SUCCESS even if it was unknown."""
        header = UnRegisterBrokerRequestHeader.from_fields(request.ext_fields)
        refusal = self._refusal(
            request, connection, "UNREGISTER_BROKER", header.broker_addr, header.broker_name, header.broker_id
        )
        if refusal is not None:
            return refusal
        self._routes.unregister_broker(header.cluster_name, header.broker_addr, header.broker_name, header.broker_id)
        logger.info("broker %s id %d (%s) unregistered", header.broker_name, header.broker_id, header.broker_addr)
        return request.make_response()

    async def get_route_info_by_topic(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        """GET_ROUTEINFO_BY_TOPIC (105): the route as standard JSON, or TOPIC_NOT_EXIST.

        Java sends fastjson's unquoted ``{0:"…"}`` keys to old clients; both real clients were
        verified with quoted keys, which every JSON parser reads, so those are always sent.
        """
        header = GetRouteInfoRequestHeader.from_fields(request.ext_fields)
        route = self._routes.topic_route(header.topic)
        if route is None:
            return request.make_response(ResponseCode.TOPIC_NOT_EXIST, remark=topic_not_exist_remark(header.topic))
        return request.make_response(body=route.encode())

    async def get_broker_cluster_info(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        """GET_BROKER_CLUSTER_INFO (106): ClusterInfo body."""
        return request.make_response(body=self._routes.cluster_info().encode())

    async def get_all_topic_list(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        """GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206): ``{"topicList":[…]}``."""
        return request.make_response(body=TopicList(self._routes.all_topics()).encode())

    async def delete_topic_in_namesrv(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        """DELETE_TOPIC_IN_NAMESRV (216): SUCCESS whether or not the topic was known (as Java)."""
        header = DeleteTopicFromNamesrvRequestHeader.from_fields(request.ext_fields)
        deleted = self._routes.delete_topic(header.topic, header.cluster_name or None)
        logger.info("topic %s deleted from the name server (known: %s)", header.topic, deleted)
        return request.make_response()

    async def wipe_write_perm(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        """WIPE_WRITE_PERM_OF_BROKER (205): ``wipeTopicCount`` = topics whose PERM_WRITE was cleared."""
        name = BrokerNameRequestHeader.from_fields(request.ext_fields).broker_name
        count = self._routes.set_write_perm(name, writable=False)
        logger.info("write perm of broker %s wiped on %d topics", name, count)
        return request.make_response(ext_fields=WritePermResponseHeader(wipe_topic_count=count).to_fields())

    async def add_write_perm(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        """ADD_WRITE_PERM_OF_BROKER (327): ``addTopicCount`` = topics whose PERM_WRITE was set."""
        name = BrokerNameRequestHeader.from_fields(request.ext_fields).broker_name
        count = self._routes.set_write_perm(name, writable=True)
        logger.info("write perm of broker %s added on %d topics", name, count)
        return request.make_response(ext_fields=WritePermResponseHeader(add_topic_count=count).to_fields())


def _topic_config_wrapper(request: RemotingCommand, compressed: bool) -> TopicConfigSerializeWrapper:
    # Java treats a null body as "no topics, data version 0/0"; an empty frame body is that here.
    if not request.body:
        return TopicConfigSerializeWrapper()
    if request.version >= MQVersion.V3_0_11:
        return RegisterBrokerBody.decode(request.body, compressed=compressed).topic_config_serialize_wrapper
    return TopicConfigSerializeWrapper.decode(request.body)


__all__ = ["CRC32_MASK", "NamesrvProcessors", "body_crc32", "topic_not_exist_remark"]
