"""TransactionProducer / AsyncTransactionProducer against a real NameServer + broker process.

The broker checks back every second (``transactionCheckInterval=1000``) about half messages
older than one second. Each test keeps a "database" of local outcomes, as an application
would: the local-transaction callback writes it, the check callback reads it. Tests wait for
events (callbacks called, messages readable), never for a fixed time.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from sparkmq import (
    AsyncTransactionProducer,
    LocalTransactionState,
    Message,
    PullConsumer,
    ReceivedMessage,
    SendStatus,
    SparkmqError,
    TransactionProducer,
)
from sparkmq.message.properties import encode_properties
from sparkmq.message.record import Host, MessageBatch, encode_records_plain
from sparkmq.protocol import RemotingCommand, RequestCode
from sparkmq.protocol.headers import CheckTransactionStateRequestHeader
from sparkmq.remoting import RemotingConnection, RemotingServer
from support.client_harness import create_topic, read_queue, wait_for, wait_for_route
from support.processes import BrokerProcess, NamesrvProcess

COMMIT, ROLLBACK, UNKNOWN = LocalTransactionState.COMMIT, LocalTransactionState.ROLLBACK, LocalTransactionState.UNKNOWN
TX_SETTINGS = ("--set", "transactionCheckInterval=1000", "--set", "transactionTimeOut=1000")
WAIT_S = 30.0


class TxCluster:
    def __init__(self, namesrv: NamesrvProcess, broker: BrokerProcess) -> None:
        self.namesrv, self.broker = namesrv, broker
        self.ns = namesrv.address

    def topic(self) -> str:
        name = f"Tx_{uuid.uuid4().hex[:10]}"
        create_topic([self.broker.address], name, 2)
        wait_for_route(self.ns, name, {"broker-a"})
        return name

    def visible(self, topic: str) -> list[bytes]:
        """Every body a consumer of ``topic`` can read, in queue order."""
        with PullConsumer(f"CID_{uuid.uuid4().hex[:8]}", self.ns) as pull:
            return [m.body for q in pull.queues_of(topic) for m in read_queue(pull, q)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TxCluster]:
    store = tmp_path_factory.mktemp("tx-store")
    with NamesrvProcess.start() as namesrv, BrokerProcess.start(store, namesrv.address, *TX_SETTINGS) as broker:
        yield TxCluster(namesrv, broker)


class Ledger:
    """The application's local database: outcome per message key, and every check the broker made."""

    def __init__(self, outcomes: dict[str, Any] | None = None) -> None:
        self.outcomes: dict[str, Any] = dict(outcomes or {})
        self.checked: list[str] = []
        self.lock = threading.Lock()

    def execute(self, message: Message, arg: Any) -> LocalTransactionState | None:
        outcome = arg
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def check(self, message: ReceivedMessage) -> LocalTransactionState | None:
        (key,) = message.keys
        with self.lock:
            self.checked.append(key)
        outcome = self.outcomes[key]
        if isinstance(outcome, list):  # a sequence of answers, one per check
            outcome = outcome.pop(0) if len(outcome) > 1 else outcome[0]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def checks_of(self, key: str) -> int:
        with self.lock:
            return self.checked.count(key)


def tx_message(topic: str, key: str) -> Message:
    return Message(topic, f"body-{key}".encode(), tags="TagTx", keys=[key], properties={"k": key})


def test_commit_is_consumed_exactly_once_and_rollback_never(cluster: TxCluster) -> None:
    topic, ledger = cluster.topic(), Ledger()
    ledger.outcomes = {f"k{i}": (COMMIT if i % 2 == 0 else ROLLBACK) for i in range(6)}
    with TransactionProducer(
        "PID_tx_commit", cluster.ns, execute_local=ledger.execute, check_local=ledger.check
    ) as producer:
        results = {
            key: producer.send_in_transaction(tx_message(topic, key), outcome)
            for key, outcome in ledger.outcomes.items()
        }
        assert all(r.send_result.status is SendStatus.SEND_OK for r in results.values())
        assert {k: r.local_state for k, r in results.items()} == ledger.outcomes
        send_result, state = results["k0"]  # unpacks like Java's (sendResult, localTransactionState)
        assert state is COMMIT and send_result.msg_id
        expected = sorted(f"body-k{i}".encode() for i in (0, 2, 4))
        wait_for(lambda: sorted(cluster.visible(topic)) == expected, WAIT_S, "the three commits to be readable")
    assert sorted(cluster.visible(topic)) == expected  # once each; no rollback ever


def test_unknown_is_resolved_by_check_back_to_commit_and_to_rollback(cluster: TxCluster) -> None:
    topic = cluster.topic()
    ledger = Ledger({"yes": COMMIT, "no": ROLLBACK})
    with TransactionProducer(
        "PID_tx_check", cluster.ns, execute_local=ledger.execute, check_local=ledger.check
    ) as producer:
        for key in ("yes", "no"):
            assert producer.send_in_transaction(tx_message(topic, key), UNKNOWN).local_state is UNKNOWN
        assert cluster.visible(topic) == []
        wait_for(lambda: ledger.checks_of("yes") and ledger.checks_of("no"), WAIT_S, "a check-back for each")
        wait_for(lambda: cluster.visible(topic) == [b"body-yes"], WAIT_S, "the checked commit to be readable")
        # A later undecided transaction, resolved by a later round: the rolled-back one stays unreadable.
        marker = producer.send_in_transaction(tx_message(topic, "marker"), UNKNOWN)
        assert marker.local_state is UNKNOWN
        ledger.outcomes["marker"] = COMMIT
        wait_for(lambda: b"body-marker" in cluster.visible(topic), WAIT_S, "the marker's check-back commit")
    assert sorted(cluster.visible(topic)) == [b"body-marker", b"body-yes"]
    assert ledger.checks_of("no") >= 1 and ledger.checks_of("yes") >= 1  # more if an answer was slower than a round


def test_callbacks_that_raise_or_return_none_count_as_unknown(cluster: TxCluster) -> None:
    topic = cluster.topic()
    ledger = Ledger({"raised": [RuntimeError("check failed"), COMMIT], "none": [None, COMMIT]})
    with TransactionProducer(
        "PID_tx_raise", cluster.ns, execute_local=ledger.execute, check_local=ledger.check
    ) as producer:
        assert producer.send_in_transaction(tx_message(topic, "raised"), RuntimeError("db down")).local_state is UNKNOWN
        assert producer.send_in_transaction(tx_message(topic, "none"), None).local_state is UNKNOWN
        # The first check of each answers UNKNOWN (raised / None), the second COMMIT.
        wait_for(lambda: sorted(cluster.visible(topic)) == [b"body-none", b"body-raised"], WAIT_S, "both commits")
    assert ledger.checks_of("raised") >= 2 and ledger.checks_of("none") >= 2  # UNKNOWN first, so asked again


def test_async_producer_with_coroutine_callbacks(cluster: TxCluster) -> None:
    topic = cluster.topic()

    async def scenario() -> list[tuple[str, LocalTransactionState]]:
        seen = asyncio.Event()
        states = {"a": COMMIT, "b": UNKNOWN, "c": ROLLBACK}

        async def execute(message: Message, arg: Any) -> LocalTransactionState:
            await asyncio.sleep(0)
            return states[arg]

        async def check(message: ReceivedMessage) -> LocalTransactionState:
            assert message.topic == topic and message.keys == ["b"] and message.body == b"body-b"
            seen.set()
            return COMMIT

        async with AsyncTransactionProducer(
            "PID_tx_async", cluster.ns, execute_local=execute, check_local=check
        ) as producer:
            results = [
                (key, (await producer.send_in_transaction(tx_message(topic, key), key)).local_state) for key in states
            ]
            await asyncio.wait_for(seen.wait(), WAIT_S)
            await asyncio.to_thread(
                wait_for,
                lambda: sorted(cluster.visible(topic)) == [b"body-a", b"body-b"],
                WAIT_S,
                "the commit and the checked commit",
            )
        return results

    assert asyncio.run(scenario()) == [("a", COMMIT), ("b", UNKNOWN), ("c", ROLLBACK)]
    assert sorted(cluster.visible(topic)) == [b"body-a", b"body-b"]


def test_send_in_transaction_needs_a_local_callback(cluster: TxCluster) -> None:
    async def scenario() -> None:
        async with AsyncTransactionProducer("PID_tx_none", cluster.ns, check_local=lambda m: COMMIT) as producer:
            with pytest.raises(SparkmqError, match="execute_local"):
                await producer.send_in_transaction(tx_message("T", "x"))

    asyncio.run(scenario())


def test_check_answer_on_the_wire() -> None:
    """A scripted broker (our RemotingServer) sends CHECK_TRANSACTION_STATE on the producer's own
    connection; the answer is a oneway END_TRANSACTION with exactly Java's fields."""

    async def scenario() -> RemotingCommand:
        answers: asyncio.Queue[RemotingCommand] = asyncio.Queue()

        async def record(request: RemotingCommand, connection: RemotingConnection) -> None:
            await answers.put(request)

        server = RemotingServer("127.0.0.1", 0)
        server.register(RequestCode.END_TRANSACTION, record)
        port = await server.start()
        producer = AsyncTransactionProducer("PID_wire", "127.0.0.1:1", check_local=lambda m: ROLLBACK)
        try:
            await producer.start()
            await producer.instance.remoting.connection(f"127.0.0.1:{port}")
            (to_client,) = server.connections
            props = encode_properties({"PGROUP": "PID_wire", "UNIQ_KEY": "UNIQ1", "REAL_TOPIC": "T", "REAL_QID": "1"})
            body = encode_records_plain(
                MessageBatch("T", 1, [b"b"], [props]), 0, 1, 7, 4242, 1, Host(b"\x7f\0\0\1", port)
            )
            header = CheckTransactionStateRequestHeader(7, 4242, "UNIQ1", "UNIQ1", "OFFSETID")
            to_client.send(
                RemotingCommand.request(
                    RequestCode.CHECK_TRANSACTION_STATE,
                    to_client.next_opaque(),
                    ext_fields=header.to_fields(),
                    body=body,
                    oneway=True,
                )
            )
            return await asyncio.wait_for(answers.get(), WAIT_S)
        finally:
            await producer.close()
            await server.close()

    end = asyncio.run(scenario())
    assert end.code == RequestCode.END_TRANSACTION and end.is_oneway and end.body in (b"", None)
    assert end.ext_fields == {
        "producerGroup": "PID_wire",
        "tranStateTableOffset": "7",
        "commitLogOffset": "4242",
        "commitOrRollback": "12",
        "msgId": "UNIQ1",
        "fromTransactionCheck": "true",
        "transactionId": "UNIQ1",
    }
