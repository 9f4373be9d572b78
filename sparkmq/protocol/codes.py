"""Numbers of the RocketMQ 4.x remoting protocol: request/response codes, languages, limits.

Names are RocketMQ's own (Java 4.9.7 ``RequestCode`` / ``ResponseCode`` /
``RemotingSysResponseCode`` / ``LanguageCode`` / ``MQVersion``), so a code seen in a
capture or in the Java source can be looked up by name.

Example::

    >>> RequestCode(105).name
    'GET_ROUTEINFO_BY_TOPIC'
    >>> int(ResponseCode.PULL_NOT_FOUND)
    19
"""

from __future__ import annotations

from enum import IntEnum, IntFlag

# --- framing limits -------------------------------------------------------------------------

#: Largest whole frame, length prefix included. Java's ``NettyDecoder`` is a
#: ``LengthFieldBasedFrameDecoder(frameMaxLength, 0, 4, 0, 4)`` with system property
#: ``com.rocketmq.remoting.frameMaxLength`` defaulting to 16777216; Netty compares
#: ``length + 4`` (the prefix) against it, so the largest length value is 16 MiB - 4.
MAX_FRAME_BYTES = 16 * 1024 * 1024
#: Size of the big-endian int32 length prefix (it does not count itself).
LENGTH_PREFIX_BYTES = 4
#: Size of the int32 ``serializeType << 24 | headerLength`` that opens every frame payload.
HEADER_LENGTH_FIELD_BYTES = 4
#: Smallest legal length value: the payload must at least hold the header-length int.
MIN_FRAME_LENGTH = HEADER_LENGTH_FIELD_BYTES
#: The header length is the low 24 bits of ``serTypeAndHeaderLen`` (``markProtocolType``).
MAX_HEADER_BYTES = 0xFFFFFF
#: Fixed part of a ROCKETMQ binary header: code i16, language i8, version i16, opaque i32,
#: flag i32, remark length i32, extFields length i32 (``RocketMQSerializable``).
BINARY_HEADER_FIXED_BYTES = 2 + 1 + 2 + 4 + 4 + 4 + 4

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

# --- flag bits (RemotingCommand.RPC_TYPE / RPC_ONEWAY) --------------------------------------

#: ``flag`` bit 0: the command is a response.
RESPONSE_FLAG = 1 << 0
#: ``flag`` bit 1: the request must not be answered (no studied client sets it on the wire).
ONEWAY_FLAG = 1 << 1


class SerializeType(IntEnum):
    """The high byte of ``serTypeAndHeaderLen`` (``SerializeType.java``)."""

    JSON = 0
    ROCKETMQ = 1


class LanguageCode(IntEnum):
    """``LanguageCode.java`` (4.9.7): the JSON header carries the name, the binary one the byte."""

    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12


class MQVersion(IntEnum):
    """Ordinals of ``MQVersion.Version`` that matter on the wire (the header ``version``)."""

    V3_0_11 = 37  # REGISTER_BROKER uses RegisterBrokerBody (with filter servers) from here on
    V3_1_8 = 63  # C++ client 1.2.0-1.2.4, i.e. the PyPI rocketmq 0.4.4 wheel
    V3_4_9 = 121  # ali-ons; CONSUMER_SEND_MSG_BACK honours maxReconsumeTimes from here on
    V4_6_0 = 333  # C++ client 1.2.5 / 2.x
    V4_9_4 = 401  # NameServer answers standard JSON (quoted brokerAddrs keys) from here on
    V4_9_7 = 407  # Java 4.9.7


#: What sparkmq writes in ``language``/``version``: it answers like a Java 4.9.7 broker,
#: which is what both real clients (C++ 1.2.x and ali-ons) were checked against (tests/protocol/test_captures.py).
DEFAULT_LANGUAGE = LanguageCode.JAVA
DEFAULT_VERSION = int(MQVersion.V4_9_7)


class ResponseCode(IntEnum):
    """``RemotingSysResponseCode`` (0-4) plus ``ResponseCode`` (Java 4.9.7)."""

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    TRANSACTION_FAILED = 4
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    FILTER_DATA_NOT_EXIST = 27
    FILTER_DATA_NOT_LATEST = 28
    TRANSACTION_SHOULD_COMMIT = 200
    TRANSACTION_SHOULD_ROLLBACK = 201
    TRANSACTION_STATE_UNKNOW = 202
    TRANSACTION_STATE_GROUP_WRONG = 203
    NO_BUYER_ID = 204
    NOT_IN_CURRENT_UNIT = 205
    CONSUMER_NOT_ONLINE = 206
    CONSUME_MSG_TIMEOUT = 207
    NO_MESSAGE = 208
    UPDATE_AND_CREATE_ACL_CONFIG_FAILED = 209
    DELETE_ACL_CONFIG_FAILED = 210
    UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED = 211
    FLOW_CONTROL = 215
    # RocketMQ 5's controller (automatic failover)
    CONTROLLER_FENCED_MASTER_EPOCH = 2000
    CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH = 2001
    CONTROLLER_INVALID_MASTER = 2002
    CONTROLLER_INVALID_REPLICAS = 2003
    CONTROLLER_MASTER_NOT_AVAILABLE = 2004
    CONTROLLER_INVALID_REQUEST = 2005
    CONTROLLER_BROKER_NOT_ALIVE = 2006
    CONTROLLER_NOT_LEADER = 2007
    CONTROLLER_BROKER_METADATA_NOT_EXIST = 2008
    CONTROLLER_INVALID_CLEAN_BROKER_METADATA = 2009
    CONTROLLER_BROKER_NEED_TO_BE_REGISTERED = 2010
    CONTROLLER_MASTER_STILL_EXIST = 2011
    CONTROLLER_ELECT_MASTER_FAILED = 2012
    CONTROLLER_ALTER_SYNC_STATE_SET_FAILED = 2013
    CONTROLLER_BROKER_ID_INVALID = 2014


class RequestCode(IntEnum):
    """``RequestCode.java`` (Java 4.9.7). C++ and ali-ons spell 105 ``GET_ROUTEINTO_BY_TOPIC``."""

    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_BROKER_OFFSET = 13
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_ALL_TOPIC_CONFIG = 21
    GET_TOPIC_CONFIG_LIST = 22
    GET_TOPIC_NAME_LIST = 23
    UPDATE_BROKER_CONFIG = 25
    GET_BROKER_CONFIG = 26
    TRIGGER_DELETE_FILES = 27
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_ALL_CONSUMER_OFFSET = 43
    GET_ALL_DELAY_OFFSET = 45
    CHECK_CLIENT_CONFIG = 46
    UPDATE_AND_CREATE_ACL_CONFIG = 50
    DELETE_ACL_CONFIG = 51
    GET_BROKER_CLUSTER_ACL_INFO = 52
    UPDATE_GLOBAL_WHITE_ADDRS_CONFIG = 53
    GET_BROKER_CLUSTER_ACL_CONFIG = 54
    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    DELETE_KV_CONFIG = 102
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_PRODUCER_CONNECTION_LIST = 204
    WIPE_WRITE_PERM_OF_BROKER = 205
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_SUBSCRIPTIONGROUP = 207
    GET_CONSUME_STATS = 208
    SUSPEND_CONSUMER = 209
    RESUME_CONSUMER = 210
    RESET_CONSUMER_OFFSET_IN_CONSUMER = 211
    RESET_CONSUMER_OFFSET_IN_BROKER = 212
    ADJUST_CONSUMER_THREAD_POOL = 213
    WHO_CONSUME_THE_MESSAGE = 214
    DELETE_TOPIC_IN_BROKER = 215
    DELETE_TOPIC_IN_NAMESRV = 216
    GET_KV_CONFIG_BY_VALUE = 217  # not in Java 4.9.7; ali-ons defines it (its call is dead code)
    GET_KVLIST_BY_NAMESPACE = 219
    RESET_CONSUMER_CLIENT_OFFSET = 220
    GET_CONSUMER_STATUS_FROM_CLIENT = 221
    INVOKE_BROKER_TO_RESET_OFFSET = 222
    INVOKE_BROKER_TO_GET_CONSUMER_STATUS = 223
    GET_TOPICS_BY_CLUSTER = 224
    QUERY_TOPIC_CONSUME_BY_WHO = 300
    REGISTER_FILTER_SERVER = 301
    REGISTER_MESSAGE_FILTER_CLASS = 302
    QUERY_CONSUME_TIME_SPAN = 303
    GET_SYSTEM_TOPIC_LIST_FROM_NS = 304
    GET_SYSTEM_TOPIC_LIST_FROM_BROKER = 305
    CLEAN_EXPIRED_CONSUMEQUEUE = 306
    GET_CONSUMER_RUNNING_INFO = 307
    QUERY_CORRECTION_OFFSET = 308
    CONSUME_MESSAGE_DIRECTLY = 309
    SEND_MESSAGE_V2 = 310
    GET_UNIT_TOPIC_LIST = 311
    GET_HAS_UNIT_SUB_TOPIC_LIST = 312
    GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST = 313
    CLONE_GROUP_OFFSET = 314
    VIEW_BROKER_STATS_DATA = 315
    CLEAN_UNUSED_TOPIC = 316
    GET_BROKER_CONSUME_STATS = 317
    UPDATE_NAMESRV_CONFIG = 318
    GET_NAMESRV_CONFIG = 319
    SEND_BATCH_MESSAGE = 320
    QUERY_CONSUME_QUEUE = 321
    QUERY_DATA_VERSION = 322
    RESUME_CHECK_HALF_MESSAGE = 323
    SEND_REPLY_MESSAGE = 324
    SEND_REPLY_MESSAGE_V2 = 325
    PUSH_REPLY_MESSAGE_TO_CLIENT = 326
    ADD_WRITE_PERM_OF_BROKER = 327
    GET_ALL_PRODUCER_INFO = 328
    DELETE_EXPIRED_COMMITLOG = 329
    # RocketMQ 5's controller (automatic failover)
    BROKER_HEARTBEAT = 904
    CONTROLLER_ALTER_SYNC_STATE_SET = 1001
    CONTROLLER_ELECT_MASTER = 1002
    CONTROLLER_REGISTER_BROKER = 1003
    CONTROLLER_GET_REPLICA_INFO = 1004
    CONTROLLER_GET_METADATA_INFO = 1005
    CONTROLLER_GET_SYNC_STATE_DATA = 1006
    GET_BROKER_EPOCH_CACHE = 1007
    NOTIFY_BROKER_ROLE_CHANGED = 1008
    CONTROLLER_GET_NEXT_BROKER_ID = 1012
    CONTROLLER_APPLY_BROKER_ID = 1013
    # RocketMQ 5's POP consumption (docs/grpc.md)
    POP_MESSAGE = 200050
    ACK_MESSAGE = 200051
    CHANGE_MESSAGE_INVISIBLETIME = 200053
    # sparkmq's own requests, 40000-40999 (no RocketMQ code is there): docs/tables.md
    SPARKMQ_TABLE_STATUS = 40001


class PermName(IntFlag):
    """Topic/queue permission bits (``PermName.java``); 6 = read + write."""

    PERM_INHERIT = 1
    PERM_WRITE = 2
    PERM_READ = 4
    PERM_PRIORITY = 8


class PullSysFlag(IntFlag):
    """``sysFlag`` bits of PULL_MESSAGE (``PullSysFlag.java``); both clients send 6 or 7."""

    COMMIT_OFFSET = 0x1
    SUSPEND = 0x2
    SUBSCRIPTION = 0x4
    CLASS_FILTER = 0x8
    LITE_PULL_MESSAGE = 0x10


def code_name(code: int, *, response: bool) -> str:
    """RocketMQ's name for a request or response code, or ``"UNKNOWN(<n>)"`` (for logs).

    >>> code_name(10, response=False), code_name(10, response=True), code_name(999, response=True)
    ('SEND_MESSAGE', 'FLUSH_DISK_TIMEOUT', 'UNKNOWN(999)')
    """
    enum_type: type[IntEnum] = ResponseCode if response else RequestCode
    try:
        return enum_type(code).name
    except ValueError:
        return f"UNKNOWN({code})"


__all__ = [
    "BINARY_HEADER_FIXED_BYTES",
    "DEFAULT_LANGUAGE",
    "DEFAULT_VERSION",
    "HEADER_LENGTH_FIELD_BYTES",
    "INT32_MAX",
    "INT32_MIN",
    "INT64_MAX",
    "INT64_MIN",
    "LENGTH_PREFIX_BYTES",
    "MAX_FRAME_BYTES",
    "MAX_HEADER_BYTES",
    "MIN_FRAME_LENGTH",
    "ONEWAY_FLAG",
    "RESPONSE_FLAG",
    "LanguageCode",
    "MQVersion",
    "PermName",
    "PullSysFlag",
    "RequestCode",
    "ResponseCode",
    "SerializeType",
    "code_name",
]
