"""Issue 9, exactly-once sink: the decision rule of sparkmq.connector.exactly_once against a real broker.

The crash windows are staged without Spark, with the writer's own functions: a task's half
messages (``write_halves``), the driver's decision and ENDs (``settle``), and a "crash" is a
step not taken (or a broker SIGKILLed). The bar runs the real thing: a file-fed query in a
subprocess driver (tests/spark/sink_driver.py) SIGKILLed twice with its process group. The broker
checks back every second (``transactionCheckInterval=1000``) about half messages older than 3 s,
and the sink producer of this process answers. Tests wait for events (rows visible, transactions
ended in the op queue), never for a fixed time. The option's own errors are checked here too.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from sparkmq.client import MessageQueue, loop_thread
from sparkmq.client.message import Message
from sparkmq.client.transaction_producer import AsyncTransactionProducer, LocalTransactionState
from sparkmq.connector import transactional_writer
from sparkmq.connector.exactly_once import TXN_PROPERTY, parse_tag, query_identity
from sparkmq.connector.sink_options import SinkOptions
from sparkmq.connector.sink_send import place_runs
from sparkmq.connector.transactional_writer import clients, close_clients, settle
from sparkmq.errors import OptionError, SparkmqError
from sparkmq.message.batch import encode_batch_items
from sparkmq.message.properties import TRANSACTION_BATCH
from sparkmq.protocol import ResponseCode
from support.processes import BrokerProcess, NamesrvProcess, wait_until
from support.spark_harness import Cluster, kill_group, running_cluster, start_driver

QUEUES = 4
HALF_TOPIC, OP_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"
DRIVER = Path(__file__).with_name("sink_driver.py")
TX_SETTINGS = (
    "--set",
    "transactionCheckInterval=1000",
    "--set",
    "transactionTimeOut=3000",
    "--set",
    "transactionCheckMax=1000",
)
WAIT_S = 60.0


@pytest.fixture(scope="module")
def tx_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("eos-store"), *TX_SETTINGS) as made:
        try:
            yield made
        finally:
            close_clients(made.ns)


def write_halves(options: SinkOptions, query: str, batch_id: int, batches: Iterator[pa.RecordBatch]):
    """What one task attempt of the exactly-once sink does, with the sink's own row conversion."""
    return transactional_writer.write_halves(options, query, batch_id, batches, place_runs)


def rows(prefix: str, count: int) -> Iterator[pa.RecordBatch]:
    bodies = [f"{prefix}-{i:05d}".encode() for i in range(count)]
    for first in range(0, count, 100):
        yield pa.RecordBatch.from_pydict({"body": pa.array(bodies[first : first + 100], pa.binary())})


def bodies(cluster: Cluster, topic: str) -> list[bytes]:
    return sorted(m.body for m in cluster.read_all(topic, QUEUES))


def ended(cluster: Cluster) -> set[str]:
    """Transaction ids the broker has ended (committed or rolled back): KEYS of its op records."""
    return {key for m in cluster.read_all(OP_TOPIC, 1) for key in m.keys}


def test_wrong_delivery_guarantee_is_an_option_error_naming_it() -> None:
    with pytest.raises(OptionError, match="'deliveryGuarantee'.*'exactly-twice'") as raised:
        SinkOptions.parse({"namesrvAddr": "127.0.0.1:9876", "deliveryguarantee": "exactly-twice"})
    assert raised.value.option == "deliveryGuarantee"
    assert SinkOptions.parse({"namesrvAddr": "x:1"}).delivery_guarantee == "at-least-once"
    assert (
        SinkOptions.parse({"namesrvAddr": "x:1", "deliveryGuarantee": "Exactly-Once"}).delivery_guarantee
        == "exactly-once"
    )


def test_query_identity_is_the_checkpoints_query_id(tmp_path: Path) -> None:
    checkpoint = tmp_path / "ck"
    before = query_identity(str(checkpoint))
    assert before == query_identity(str(checkpoint) + "/") and before.startswith("ckpt-")
    checkpoint.mkdir()
    (checkpoint / "metadata").write_text('{"id":"5f0c2a4e-1111-2222-3333-444455556666"}\n')
    assert (
        query_identity(str(checkpoint))
        == query_identity(f"file:{checkpoint}")
        == "5f0c2a4e-1111-2222-3333-444455556666"
    )


def test_nothing_is_visible_until_commit_and_a_replayed_commit_writes_nothing_again(tx_cluster: Cluster) -> None:
    cluster, topic, query = tx_cluster, tx_cluster.topic(QUEUES), f"q{uuid.uuid4().hex[:8]}"
    options = SinkOptions(cluster.ns, topic)
    first = write_halves(options, query, 0, rows("a", 300))
    second = write_halves(options, query, 0, rows("b", 200))
    assert first.sent == 300 and second.sent == 200
    # Batch half messages: one per queue and run of rows (an Arrow batch of 100 rows lands on one or two
    # queues: round robin moves on every batchSize rows), not one per row.
    assert sum(len(halves) for halves in first.halves.values()) <= 6
    # The writer checked once that this broker refuses a malformed batch half message (a sparkmq broker).
    assert (cluster.ns, "broker-a") in transactional_writer._checked_brokers
    assert bodies(cluster, topic) == []  # half messages only

    assert settle(options, query, 0, [first, second], decide=True) == (500, 0)
    expected = sorted([f"a-{i:05d}".encode() for i in range(300)] + [f"b-{i:05d}".encode() for i in range(200)])
    assert bodies(cluster, topic) == expected
    messages = cluster.read_all(topic, QUEUES)
    assert {parse_tag(m.properties[TXN_PROPERTY])[:2] for m in messages} == {(query, 0)}
    # Spark replays the commit (driver killed before commits/0): the same ENDs change nothing.
    settle(options, query, 0, [first, second], decide=True)
    assert bodies(cluster, topic) == expected


def test_rerun_after_a_crash_past_the_marker_is_rolled_back_and_the_first_run_committed(tx_cluster: Cluster) -> None:
    cluster, topic, query = tx_cluster, tx_cluster.topic(QUEUES), f"q{uuid.uuid4().hex[:8]}"
    options = SinkOptions(cluster.ns, topic)
    producer, log = clients(options)
    first = write_halves(options, query, 7, rows("row", 250))
    # The driver recorded the decision, then died before any END (and before Spark's commits/7).
    assert loop_thread.run(log.decide(producer, query, 7, {first.token})) == {first.token}

    # Spark re-runs batch 7 from its offset log: the same rows, new half messages, a new token.
    rerun = write_halves(options, query, 7, rows("row", 250))
    assert settle(options, query, 7, [rerun], decide=True) == (0, 250)
    # The first run's halves are committed by the broker's check-back, answered from the commit log.
    expected = [f"row-{i:05d}".encode() for i in range(250)]
    assert wait_until(lambda: len(bodies(cluster, topic)) >= 250, WAIT_S), "the check-back did not commit the first run"
    first_ids = {half[2] for halves in first.halves.values() for half in halves}
    rerun_ids = {half[2] for halves in rerun.halves.values() for half in halves}
    assert first_ids | rerun_ids <= ended(cluster)
    assert bodies(cluster, topic) == expected
    assert {parse_tag(m.properties[TXN_PROPERTY])[2] for m in cluster.read_all(topic, QUEUES)} == {first.token}


def test_halves_of_a_run_killed_before_its_marker_are_rolled_back_once_the_rerun_commits(tx_cluster: Cluster) -> None:
    cluster, topic, query = tx_cluster, tx_cluster.topic(QUEUES), f"q{uuid.uuid4().hex[:8]}"
    options = SinkOptions(cluster.ns, topic)
    killed = write_halves(options, query, 3, rows("row", 150))  # the driver died before commit(3)
    rerun = write_halves(options, query, 3, rows("row", 150))
    assert settle(options, query, 3, [rerun], decide=True) == (150, 0)
    killed_ids = {half[2] for halves in killed.halves.values() for half in halves}
    assert wait_until(lambda: killed_ids <= ended(cluster), WAIT_S), "the killed run's halves were not ended"
    assert bodies(cluster, topic) == [f"row-{i:05d}".encode() for i in range(150)]
    assert {parse_tag(m.properties[TXN_PROPERTY])[2] for m in cluster.read_all(topic, QUEUES)} == {rerun.token}
    # A later batch's marker also settles a batch that never got one: Spark passed it.
    _producer, log = clients(options)
    orphan = write_halves(options, query, 4, rows("orphan", 10))
    settle(options, query, 5, [write_halves(options, query, 5, rows("five", 10))], decide=True)
    assert loop_thread.run(log.state_of(query, 4, orphan.token)).name == "ROLLBACK"


def test_batch_half_messages_compressed_or_not_commit_every_row_and_garbage_is_refused_at_send(
    tx_cluster: Cluster,
) -> None:
    """The broker side of batch half messages with any client: a zlib-compressed body (a default producer
    compresses bodies over 4 KiB) commits the rows it carries, in order, the last one under the transaction
    id; a body that is no SEND_BATCH body is refused when sent (MESSAGE_ILLEGAL), never at its COMMIT."""
    cluster, topic = tx_cluster, tx_cluster.topic(1)
    queue = MessageQueue(topic, "broker-a", 0)
    rows_sent = [Message(topic, f"row-{i:04d}-{'x' * 40}", tags="T", keys=f"k{i}") for i in range(200)]
    body = encode_batch_items(
        [m.body_bytes for m in rows_sent], [m.encoded_properties(f"ID{i:030d}") for i, m in enumerate(rows_sent)]
    )

    async def send_and_commit() -> str:
        async with AsyncTransactionProducer(
            f"PID_batch_{uuid.uuid4().hex[:6]}", cluster.ns, check_local=lambda m: LocalTransactionState.UNKNOWN
        ) as producer:
            with pytest.raises(SparkmqError, match="batch half message") as refused:
                await producer.send_half(Message(topic, b"not a batch", properties={TRANSACTION_BATCH: "true"}), queue)
            assert refused.value.code == ResponseCode.MESSAGE_ILLEGAL
            half = await producer.send_half(Message(topic, body, properties={TRANSACTION_BATCH: "true"}), queue)
            assert len(body) >= producer.compress_over_bytes  # so it travelled and was stored compressed
            await producer.end_transaction(half, LocalTransactionState.COMMIT)
            return half.msg_id

    txid = loop_thread.run(send_and_commit())
    assert wait_until(lambda: cluster.max_offset(topic, 0) == 200, WAIT_S)
    stored = cluster.read_all(topic, 1)
    assert [m.body for m in stored] == [m.body_bytes for m in rows_sent]
    assert [m.tags for m in stored] == ["T"] * 200 and stored[7].keys == ["k7"] and stored[7].msg_id == f"ID{7:030d}"
    assert stored[-1].msg_id == txid  # the check-back finds a commit by this id only once the whole run is stored
    assert wait_until(lambda: txid in ended(cluster), WAIT_S)


def test_abort_rolls_back_what_the_commit_log_does_not_name(tx_cluster: Cluster) -> None:
    cluster, topic, query = tx_cluster, tx_cluster.topic(QUEUES), f"q{uuid.uuid4().hex[:8]}"
    options = SinkOptions(cluster.ns, topic)
    done = write_halves(options, query, 0, rows("row", 40))
    assert settle(options, query, 0, [done], decide=False) == (0, 40)
    ids = {half[2] for halves in done.halves.values() for half in halves}
    assert ids <= ended(cluster) and bodies(cluster, topic) == []


def test_broker_killed_amid_the_commit_keeps_the_batch_exactly_once(tmp_path: Path) -> None:
    """SIGKILL of the broker (SYNC flush) after the marker and some ENDs: the driver's commit fails,
    the restarted broker's check-back commits the rest, and the query's re-run of the batch adds nothing."""
    with NamesrvProcess.start() as namesrv:
        store, flags = tmp_path / "store", ("--flush", "sync", *TX_SETTINGS)
        cluster = Cluster(namesrv, BrokerProcess.start(store, namesrv.address, *flags))
        try:
            topic, query = cluster.topic(QUEUES), f"q{uuid.uuid4().hex[:8]}"
            options = SinkOptions(cluster.ns, topic)
            producer, log = clients(options)
            first, second = (
                write_halves(options, query, 0, rows("a", 120)),
                write_halves(options, query, 0, rows("b", 80)),
            )
            assert settle(options, query, 0, [first], decide=False) == (0, 120)  # a failed attempt's halves
            first = write_halves(options, query, 0, rows("a", 120))  # its retry
            loop_thread.run(log.decide(producer, query, 0, {first.token, second.token}))
            assert settle(options, query, 0, [first], decide=False) == (120, 0)  # part of the ENDs went out
            port = cluster.broker.port
            cluster.broker.kill()
            with pytest.raises(SparkmqError):  # the commit log is unreachable: the commit fails, so does the query
                settle(options, query, 0, [second], decide=True)
            cluster.broker = BrokerProcess.start(store, namesrv.address, *flags, port=port)
            loop_thread.run(producer.instance.heartbeat())  # as every 30 s: the new broker learns the live producer
            expected = sorted([f"a-{i:05d}".encode() for i in range(120)] + [f"b-{i:05d}".encode() for i in range(80)])
            assert wait_until(lambda: len(bodies(cluster, topic)) >= 200, WAIT_S), (
                "the check-back did not commit the rest"
            )
            rerun = write_halves(options, query, 0, rows("b", 80))  # the restarted query re-runs batch 0
            assert settle(options, query, 0, [rerun], decide=True) == (0, 80)
            assert bodies(cluster, topic) == expected
        finally:
            close_clients(cluster.ns)
            cluster.close()
            cluster.broker.stop()


def visible(cluster: Cluster, topic: str) -> int:
    return sum(cluster.max_offset(topic, q) for q in range(QUEUES))


@pytest.mark.slow
def test_the_bar_20000_rows_two_sigkills_of_the_driver_each_row_once(tx_cluster: Cluster, tmp_path: Path) -> None:
    """A file-fed query writes 20,000 rows exactly-once; its whole driver process group is SIGKILLed
    twice, each time while a batch's ENDs are going out (its marker written, Spark's commits/N not),
    and restarted from the checkpoint; a last run finishes with AvailableNow."""
    cluster, topic = tx_cluster, tx_cluster.topic(QUEUES)
    files, per_file, per_trigger = 20, 1000, 2
    source = tmp_path / "in"
    source.mkdir()
    for f in range(files):
        (source / f"part-{f:03d}.txt").write_text("".join(f"row-{f * per_file + i:05d}\n" for i in range(per_file)))
    common = [
        "--namesrv",
        cluster.ns,
        "--input",
        str(source),
        "--topic",
        topic,
        "--checkpoint",
        str(tmp_path / "ck"),
        "--files-per-trigger",
        str(per_trigger),
    ]
    batch_rows = per_file * per_trigger
    for run, kill_above in enumerate((batch_rows + batch_rows // 2, 4 * batch_rows + batch_rows // 2)):
        log = tmp_path / f"driver-{run}.log"
        driver = start_driver(DRIVER, common, log)
        try:
            deadline = time.monotonic() + 240
            while visible(cluster, topic) <= kill_above:  # mid-batch: some of its rows visible, not all
                assert driver.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, (
                    f"run {run} did not get past {kill_above} rows\n" + log.read_text()[-3000:]
                )
                time.sleep(0.02)
        finally:
            kill_group(driver)
        assert driver.returncode == -signal.SIGKILL
        print(f"run {run} killed with {visible(cluster, topic)} rows visible")

    last = tmp_path / "driver-last.log"
    driver = start_driver(DRIVER, [*common, "--available-now"], last)
    try:
        assert driver.wait(300) == 0, last.read_text()[-3000:]
    finally:
        kill_group(driver)

    # Every half message is decided once the check-back has ended the killed runs' leftovers.
    def settled() -> bool:
        halves = {m.msg_id for m in cluster.read_all(HALF_TOPIC, 1) if m.properties.get("REAL_TOPIC") == topic}
        return halves <= ended(cluster)

    assert wait_until(settled, WAIT_S, interval_s=0.5), "half messages are still undecided"
    seen = Counter(m.body for m in cluster.read_all(topic, QUEUES))
    expected = {f"row-{i:05d}".encode() for i in range(files * per_file)}
    assert set(seen) == expected, (len(expected - set(seen)), len(set(seen) - expected))
    twice = [body for body, n in seen.items() if n > 1]
    assert not twice, f"{len(twice)} rows written more than once, e.g. {twice[:3]}"


def test_exactly_once_on_a_batch_write_is_an_option_error(spark, tx_cluster: Cluster) -> None:
    df = spark.createDataFrame([("x",)], "body string")
    with pytest.raises(Exception, match="deliveryGuarantee.*exactly-once is for streaming writes"):
        (
            df.write.format("sparkmq")
            .mode("append")
            .option("namesrvAddr", tx_cluster.ns)
            .option("topic", tx_cluster.topic(1))
            .option("deliveryGuarantee", "exactly-once")
            .save()
        )
