"""Transactional producers: ``AsyncTransactionProducer`` (asyncio) and ``TransactionProducer`` (blocking).

Java's ``TransactionMQProducer``: ``send_in_transaction`` stores a half message (invisible to
consumers), runs the local-transaction callback, then tells the broker COMMIT, ROLLBACK or
UNKNOWN (END_TRANSACTION, oneway). For an UNKNOWN, or an END that never arrived, the broker
later asks a producer of the group (CHECK_TRANSACTION_STATE) and the check callback answers.
A callback that raises or returns None counts as UNKNOWN, as in Java: the broker asks again
until ``transactionCheckMax`` checks, then discards the message.

Check callbacks may be plain functions (run in a worker thread, never on the event loop) or
coroutine functions. The local-transaction callback runs in the caller's thread (blocking
producer) or is awaited when it is a coroutine function (asyncio producer).
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from sparkmq.client import loop_thread, trace_hooks
from sparkmq.client.message import Message, ReceivedMessage, SendResult, SendStatus
from sparkmq.client.producer import AsyncProducer
from sparkmq.client.trace_data import TRANS_MSG_HALF
from sparkmq.client.trace_dispatcher import TraceDispatcher
from sparkmq.errors import ConfigError, SparkmqError
from sparkmq.message import layout as L
from sparkmq.message.msgid import decode_offset_msg_id
from sparkmq.message.properties import PRODUCER_GROUP, TRANSACTION_PREPARED
from sparkmq.message.record import StoredMessage
from sparkmq.protocol import RemotingCommand, RequestCode
from sparkmq.protocol.bodies import MessageQueue
from sparkmq.protocol.headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader
from sparkmq.remoting import RemotingConnection

logger = logging.getLogger(__name__)


class LocalTransactionState(enum.Enum):
    """A local transaction's outcome; the values are END_TRANSACTION's ``commitOrRollback``."""

    COMMIT = L.TRANSACTION_COMMIT_TYPE
    ROLLBACK = L.TRANSACTION_ROLLBACK_TYPE
    UNKNOWN = L.TRANSACTION_NOT_TYPE


#: LocalTransactionState's names in Java, as EndTransaction trace records carry them
_TRACE_STATE_NAMES = {
    LocalTransactionState.COMMIT: "COMMIT_MESSAGE",
    LocalTransactionState.ROLLBACK: "ROLLBACK_MESSAGE",
    LocalTransactionState.UNKNOWN: "UNKNOW",
}


class TransactionSendResult(NamedTuple):
    """What ``send_in_transaction`` returns: the half message's send result and the local state."""

    send_result: SendResult
    local_state: LocalTransactionState


_State = LocalTransactionState | None | Awaitable[LocalTransactionState | None]
LocalTransaction = Callable[[Message, Any], _State]
"""``execute_local(message, arg)``: run the local transaction, return its state."""
TransactionCheck = Callable[[ReceivedMessage], _State]
"""``check_local(message)``: the state of the local transaction of an earlier half message."""


def _as_state(value: object, what: str) -> LocalTransactionState:
    if isinstance(value, LocalTransactionState):
        return value
    if value is not None:
        logger.error("%s returned %r, not a LocalTransactionState: counted as UNKNOWN", what, value)
    return LocalTransactionState.UNKNOWN


def local_state_of(execute_local: LocalTransaction, message: Message, arg: Any) -> LocalTransactionState:
    """Run a plain local-transaction callback in this thread; raising or None means UNKNOWN."""
    try:
        return _as_state(execute_local(message, arg), "the local transaction")
    except Exception:  # Java logs and ends the transaction as UNKNOWN; the check-back decides later
        logger.exception(
            "the local transaction of a %s message failed: UNKNOWN, the broker will check back", message.topic
        )
        return LocalTransactionState.UNKNOWN


async def _evaluate(
    callback: Callable[..., _State], args: tuple[Any, ...], what: str, in_thread: bool
) -> LocalTransactionState:
    """Run a callback (awaited when it is async, in a worker thread when ``in_thread``); raising is UNKNOWN."""
    try:
        if in_thread and not inspect.iscoroutinefunction(callback):
            result = await asyncio.to_thread(callback, *args)
        else:
            result = callback(*args)
        return _as_state(await result if inspect.isawaitable(result) else result, what)
    except Exception:  # as Java: the state stays UNKNOWN and the broker checks back later
        logger.exception("%s failed: counted as UNKNOWN, the broker will check back", what)
        return LocalTransactionState.UNKNOWN


class AsyncTransactionProducer(AsyncProducer):
    """A producer whose sends are transactional; answers the broker's check-backs for its group.

    For example::

        async def pay(message, order): return LocalTransactionState.COMMIT if await db.pay(order) else ...
        def paid(message): return LocalTransactionState.COMMIT if db.paid(message.keys[0]) else ...
        async with AsyncTransactionProducer("PID_pay", ns, execute_local=pay, check_local=paid) as producer:
            result, state = await producer.send_in_transaction(Message("payments", b"..."), order)
    """

    def __init__(
        self,
        group: str,
        namesrv_addr: str,
        *,
        execute_local: LocalTransaction | None = None,
        check_local: TransactionCheck,
        **options: Any,
    ) -> None:
        super().__init__(group, namesrv_addr, **options)
        self.execute_local = execute_local
        self.check_local = check_local

    async def start(self) -> None:
        self.instance.transaction_checkers[self.group] = self._answer_check
        await super().start()

    async def send_in_transaction(self, message: Message, arg: Any = None) -> TransactionSendResult:
        """Store ``message`` as a half message, run ``execute_local(message, arg)``, end the transaction."""
        if self.execute_local is None:
            raise ConfigError("send_in_transaction needs the execute_local callback")
        half = await self.send_half(message)
        if half.status is not SendStatus.SEND_OK:
            state = LocalTransactionState.ROLLBACK  # Java: not stored durably, so not run
        else:
            state = await _evaluate(self.execute_local, (message, arg), "the local transaction", in_thread=False)
        await self.end_transaction(half, state, message)
        return TransactionSendResult(half, state)

    def _trace_end(
        self, message: Message | ReceivedMessage, msg_id: str, host: str, state: LocalTransactionState, from_check: bool
    ) -> None:
        """The EndTransaction trace of an END_TRANSACTION sent to the broker at ``host``."""
        if self.tracer is not None and self.tracer.traces(message.topic):
            name = _TRACE_STATE_NAMES[state]
            self.tracer.append(trace_hooks.end_transaction(self.group, message, msg_id, msg_id, name, from_check, host))

    async def send_half(self, message: Message, queue: MessageQueue | None = None) -> SendResult:
        """Step 1: store ``message`` as a half message (``TRAN_MSG``, ``PGROUP``, sysFlag PREPARED), to
        ``queue`` when given (then sent once, never retried elsewhere)."""
        props = {**message.properties, TRANSACTION_PREPARED: "true", PRODUCER_GROUP: self.group}
        half = dataclasses.replace(message, properties=props, delay_level=0)  # Java clears a delay level
        body, sys_flag = self._body_of(half)
        unique_id = self._ids.next_id()
        started_ms = trace_hooks.now_ms()
        result = await self.send_prepared(
            half.topic,
            RequestCode.SEND_MESSAGE_V2,
            body,
            half.properties_text(unique_id),
            unique_id,
            sys_flag | L.TRANSACTION_PREPARED_TYPE,
            half.flag,
            queue,
        )
        if self.tracer is not None and self.tracer.traces(message.topic):
            host = self.instance.broker_address(result.queue.broker_name)
            self.tracer.append(trace_hooks.pub(self.group, message, result, started_ms, host, TRANS_MSG_HALF))
        return result

    async def end_transaction(
        self, half: SendResult, state: LocalTransactionState, message: Message | None = None
    ) -> None:
        """Step 3: tell the half message's broker the outcome (oneway; a failure is logged, the check-back
        then asks). With ``message`` (the half message as sent), a traced producer records it."""
        header = EndTransactionRequestHeader(
            self.group,
            half.queue_offset,
            decode_offset_msg_id(half.offset_msg_id)[2],
            state.value,
            half.msg_id,
            False,
            half.msg_id,
        )
        try:
            address = self.instance.broker_address(half.queue.broker_name)
            await self.instance.remoting.invoke_oneway(address, RequestCode.END_TRANSACTION, header.to_fields())
            if message is not None:
                self._trace_end(message, half.msg_id, address, state, False)
        except SparkmqError as exc:
            logger.warning(
                "END_TRANSACTION %s for %s failed: %s; the broker will check back", state.name, half.msg_id, exc.remark
            )

    async def _answer_check(
        self, header: CheckTransactionStateRequestHeader, stored: StoredMessage, connection: RemotingConnection
    ) -> None:
        """Run ``check_local`` for a broker's CHECK_TRANSACTION_STATE and answer on the same connection."""
        try:
            message = ReceivedMessage.of(stored, self._broker_name_at(connection))
        except SparkmqError as exc:
            logger.error("transaction check of %s: the message cannot be read (%s): UNKNOWN", header.msg_id, exc.remark)
            state = LocalTransactionState.UNKNOWN
        else:
            state = await _evaluate(self.check_local, (message,), "the transaction check", in_thread=True)
            self._trace_end(message, message.msg_id, f"{connection.peer[0]}:{connection.peer[1]}", state, True)
        msg_id = stored.properties.get("UNIQ_KEY") or header.offset_msg_id or ""
        answer = EndTransactionRequestHeader(
            self.group,
            header.tran_state_table_offset,
            header.commit_log_offset,
            state.value,
            msg_id,
            True,
            header.transaction_id,
        )
        fields = answer.to_fields()
        if self.instance.remoting.signer is not None:  # this answer bypasses RemotingClient.invoke
            fields = self.instance.remoting.signer(fields, b"")
        connection.send(
            RemotingCommand.request(
                RequestCode.END_TRANSACTION, connection.next_opaque(), ext_fields=fields, oneway=True
            )
        )

    def _broker_name_at(self, connection: RemotingConnection) -> str:
        address = f"{connection.peer[0]}:{connection.peer[1]}"
        for route in self.instance.routes.values():
            for broker in route.data.broker_datas:
                if address in broker.broker_addrs.values():
                    return broker.broker_name
        return address


class TransactionProducer:
    """The blocking transactional producer: ``AsyncTransactionProducer`` on the client loop.

    ``execute_local`` runs in the thread that calls ``send_in_transaction``; ``check_local`` in a
    worker thread when the broker checks back.

    For example::

        def pay(message, order):
            return LocalTransactionState.COMMIT if db.pay(order) else LocalTransactionState.ROLLBACK

        def paid(message):
            return LocalTransactionState.COMMIT if db.paid(message.keys[0]) else LocalTransactionState.UNKNOWN

        with TransactionProducer("PID_pay", "127.0.0.1:9876", execute_local=pay, check_local=paid) as producer:
            result, state = producer.send_in_transaction(Message("payments", b"..."), order)
    """

    def __init__(
        self,
        group: str,
        namesrv_addr: str,
        *,
        execute_local: Callable[[Message, Any], LocalTransactionState | None],
        check_local: Callable[[ReceivedMessage], LocalTransactionState | None],
        **options: Any,
    ) -> None:
        self.execute_local = execute_local
        self._async = AsyncTransactionProducer(group, namesrv_addr, check_local=check_local, **options)

    @property
    def tracer(self) -> TraceDispatcher | None:
        """The trace dispatcher (``enable_msg_trace``): its ``sent``, ``failed`` and ``dropped`` counts."""
        return self._async.tracer

    def start(self) -> None:
        loop_thread.run(self._async.start())

    def close(self) -> None:
        loop_thread.run(self._async.close())

    def __enter__(self) -> TransactionProducer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def send_in_transaction(self, message: Message, arg: Any = None) -> TransactionSendResult:
        """Store a half message, run ``execute_local(message, arg)`` here, end the transaction."""
        half = loop_thread.run(self._async.send_half(message))
        if half.status is SendStatus.SEND_OK:
            state = local_state_of(self.execute_local, message, arg)
        else:
            state = LocalTransactionState.ROLLBACK
        loop_thread.run(self._async.end_transaction(half, state, message))
        return TransactionSendResult(half, state)
