"""What each request code needs, as RocketMQ's ``PlainAccessValidator.parse`` works it out.

Resources are topics and ``%RETRY%<group>`` keys (so a group is checked as its retry topic,
and a send to a retry topic is checked as SUB on its group). Codes not listed need no resource:
their signature is still checked. sparkmq adds QUERY_CONSUMER_OFFSET (group SUB + topic SUB, as
ACL 2.0 does): ACL 1.0 let anyone with a valid key read any group's offsets.

>>> needed_resources(RemotingCommand(code=11, ext_fields={"topic": "T", "consumerGroup": "G"}))
{'T': <Perm.SUB: 8>, '%RETRY%G': <Perm.SUB: 8>}
"""

from __future__ import annotations

from sparkmq.broker.acl.accounts import RETRY_PREFIX, Perm, retry_topic
from sparkmq.protocol import RemotingCommand, RequestCode
from sparkmq.protocol.heartbeat import HeartbeatData

#: ``Permission.ADMIN_CODE``: only an account with ``admin: true`` may send these.
ADMIN_CODES = frozenset(
    {
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        RequestCode.UPDATE_BROKER_CONFIG,
        RequestCode.DELETE_TOPIC_IN_BROKER,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        RequestCode.DELETE_SUBSCRIPTIONGROUP,
    }
)
_SEND_FIELDS: dict[int, tuple[str, str]] = {
    RequestCode.SEND_MESSAGE: ("topic", "group"),
    RequestCode.SEND_MESSAGE_V2: ("b", "a"),
    RequestCode.SEND_BATCH_MESSAGE: ("b", "a"),
}
_GROUP_ONLY: dict[int, str] = {
    RequestCode.CONSUMER_SEND_MSG_BACK: "group",
    RequestCode.UNREGISTER_CLIENT: "consumerGroup",
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: "consumerGroup",
}
_TOPIC_AND_GROUP = frozenset(
    {RequestCode.PULL_MESSAGE, RequestCode.UPDATE_CONSUMER_OFFSET, RequestCode.QUERY_CONSUMER_OFFSET}
)


def needed_resources(request: RemotingCommand) -> dict[str, Perm]:
    """Resource → permission ``request`` needs (empty: only the signature is checked)."""
    code, fields = request.code, request.ext_fields
    needed: dict[str, Perm] = {}
    if code in _SEND_FIELDS:
        topic_key, group_key = _SEND_FIELDS[code]
        topic = fields.get(topic_key)
        if topic is not None and topic.startswith(RETRY_PREFIX):
            _add(needed, _retry(fields.get(group_key)), Perm.SUB)
        else:
            _add(needed, topic, Perm.PUB)
    elif code in _TOPIC_AND_GROUP:
        _add(needed, fields.get("topic"), Perm.SUB)
        _add(needed, _retry(fields.get("consumerGroup")), Perm.SUB)
    elif code in _GROUP_ONLY:
        _add(needed, _retry(fields.get(_GROUP_ONLY[code])), Perm.SUB)
    elif code == RequestCode.QUERY_MESSAGE:
        _add(needed, fields.get("topic"), Perm.SUB)
    elif code == RequestCode.HEART_BEAT:
        for consumer in HeartbeatData.decode(request.body).consumer_data_set:
            _add(needed, retry_topic(consumer.group_name), Perm.SUB)
            for subscription in consumer.subscription_data_set:
                _add(needed, subscription.topic, Perm.SUB)
    return needed


def _retry(group: str | None) -> str | None:
    return None if group is None else retry_topic(group)


def _add(needed: dict[str, Perm], resource: str | None, perm: Perm) -> None:
    if resource is not None:  # PlainAccessResource.addResourceAndPerm ignores a null resource
        needed[resource] = perm


__all__ = ["ADMIN_CODES", "needed_resources"]
