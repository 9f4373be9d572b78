"""sparkmq's own clients: producers, pull and push consumers (asyncio core, blocking facades).

The public names are imported on first use (PEP 562 ``__getattr__``): a Spark worker that needs
only the pull path does not pay for the producers, the push consumer and the admin client.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkmq.client.admin import Admin, QueueLag
    from sparkmq.client.consume_service import ConsumeResult
    from sparkmq.client.message import Message, ReceivedMessage, SendResult, SendStatus
    from sparkmq.client.producer import AsyncProducer, Producer
    from sparkmq.client.pull_consumer import AsyncPullConsumer, PullConsumer
    from sparkmq.client.pull_wire import PullResult
    from sparkmq.client.push_consumer import AsyncPushConsumer, PushConsumer
    from sparkmq.client.queue_select import select_by_hash
    from sparkmq.client.rebalance import (
        allocate_averagely,
        allocate_averagely_by_circle,
        allocate_by_config,
        allocate_by_machine_room,
        allocate_consistent_hash,
        allocate_machine_room_nearby,
    )
    from sparkmq.client.security import ClientSecurity
    from sparkmq.client.selector import MessageSelector
    from sparkmq.client.transaction_producer import (
        AsyncTransactionProducer,
        LocalTransactionState,
        TransactionProducer,
        TransactionSendResult,
    )
    from sparkmq.protocol.acl_signing import SessionCredentials
    from sparkmq.protocol.bodies import MessageQueue

_HOMES = {  # public name → the module defining it
    **dict.fromkeys(("Admin", "QueueLag"), "sparkmq.client.admin"),
    "ConsumeResult": "sparkmq.client.consume_service",
    **dict.fromkeys(("Message", "ReceivedMessage", "SendResult", "SendStatus"), "sparkmq.client.message"),
    **dict.fromkeys(("AsyncProducer", "Producer"), "sparkmq.client.producer"),
    "select_by_hash": "sparkmq.client.queue_select",
    **dict.fromkeys(("AsyncPullConsumer", "PullConsumer"), "sparkmq.client.pull_consumer"),
    "PullResult": "sparkmq.client.pull_wire",
    **dict.fromkeys(("AsyncPushConsumer", "PushConsumer"), "sparkmq.client.push_consumer"),
    **dict.fromkeys(
        (
            "allocate_averagely",
            "allocate_averagely_by_circle",
            "allocate_by_config",
            "allocate_by_machine_room",
            "allocate_consistent_hash",
            "allocate_machine_room_nearby",
        ),
        "sparkmq.client.rebalance",
    ),
    "ClientSecurity": "sparkmq.client.security",
    "MessageSelector": "sparkmq.client.selector",
    **dict.fromkeys(
        ("AsyncTransactionProducer", "LocalTransactionState", "TransactionProducer", "TransactionSendResult"),
        "sparkmq.client.transaction_producer",
    ),
    "SessionCredentials": "sparkmq.protocol.acl_signing",
    "MessageQueue": "sparkmq.protocol.bodies",
}


def lazy_attribute(namespace: dict[str, object], homes: dict[str, str], name: str) -> object:
    """``name`` from its module in ``homes``, imported now and kept in ``namespace`` (a package's
    globals) so the next lookup is a plain attribute; AttributeError for any other name (that
    is also how ``from package import submodule`` finds submodules)."""
    home = homes.get(name)
    if home is None:
        raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
    value = getattr(import_module(home), name)
    namespace[name] = value
    return value


def __getattr__(name: str) -> object:
    return lazy_attribute(globals(), _HOMES, name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})


__all__ = [
    "Admin",
    "AsyncProducer",
    "AsyncPullConsumer",
    "AsyncPushConsumer",
    "ConsumeResult",
    "Message",
    "MessageQueue",
    "MessageSelector",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PushConsumer",
    "QueueLag",
    "ReceivedMessage",
    "SendResult",
    "SendStatus",
    "allocate_averagely",
    "allocate_averagely_by_circle",
    "allocate_by_config",
    "allocate_by_machine_room",
    "allocate_consistent_hash",
    "allocate_machine_room_nearby",
    "select_by_hash",
    "AsyncTransactionProducer",
    "LocalTransactionState",
    "TransactionProducer",
    "TransactionSendResult",
    "ClientSecurity",
    "SessionCredentials",
]
