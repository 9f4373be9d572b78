"""Transaction check-back across a controller failover, as real processes.

A half message left UNKNOWN by its producer on the master; the master is SIGKILLed. The newly
elected master starts checking back (the producer then says COMMIT) and the committed message
is read; a master demoted by a designated election stops checking (Java's
``startProcessorByHa`` / ``shutdownProcessorByHa``).
"""

from __future__ import annotations

import threading
from pathlib import Path

from sparkmq import LocalTransactionState, Message, ReceivedMessage, SendStatus, SparkmqError, TransactionProducer
from sparkmq.protocol import RequestCode, ResponseCode
from support.controller_group import GROUP, UNTIL_S, ControllerGroup, ask, read_all
from support.processes import wait_until

FAST_CHECKS = (
    *("--set", "transactionCheckInterval=300", "--set", "transactionTimeOut=300"),
    *("--set", "transactionCheckMax=100000"),  # no discard while the producer is unknown to the new master
)


class Ledger:
    """The producer's side: every transaction is undecided until ``decided`` is set, then committed."""

    def __init__(self) -> None:
        self.decided = threading.Event()
        self.checks = 0
        self.committed: list[bytes] = []

    def execute(self, message: Message, arg: object) -> LocalTransactionState:
        return LocalTransactionState.UNKNOWN

    def check(self, message: ReceivedMessage) -> LocalTransactionState:
        self.checks += 1
        if not self.decided.is_set():
            return LocalTransactionState.UNKNOWN
        self.committed.append(message.body)
        return LocalTransactionState.COMMIT


def test_the_new_master_checks_back_a_half_message_the_killed_master_left_undecided(tmp_path: Path) -> None:
    topic, ledger = "CtlTx", Ledger()
    with ControllerGroup(tmp_path, 2, extra=FAST_CHECKS) as group:
        assert wait_until(group.all_in_sync, UNTIL_S), "the group never had both brokers in sync"
        assert group.namesrv is not None
        namesrv = group.namesrv.address
        with TransactionProducer("PID_CTL_TX", namesrv, execute_local=ledger.execute, check_local=ledger.check) as tx:
            half = tx.send_in_transaction(Message(topic, b"undecided"))
            assert half.local_state is LocalTransactionState.UNKNOWN
            assert wait_until(lambda: ledger.checks > 0, UNTIL_S), "the master never checked back"
            old, old_id = group.master_index(), group.replica_info()[0]
            assert old is not None and old_id is not None
            group.kill(old)
            assert wait_until(lambda: group.master_index() not in (None, old), UNTIL_S), "no master was elected"

            def send_again() -> bool:  # the new master learns the producer's connection from it
                try:
                    again = tx.send_in_transaction(Message(topic, b"after the failover"))
                except SparkmqError:
                    return False
                return again.send_result.status is SendStatus.SEND_OK

            assert wait_until(send_again, UNTIL_S), "no half message was stored on the new master"
            ledger.decided.set()  # from now on only the new master can ask and commit
            wanted = {b"undecided", b"after the failover"}
            assert wait_until(lambda: set(ledger.committed) == wanted, UNTIL_S), "the new master never checked back"
            assert read_all(namesrv, topic, wanted) == wanted

            demoted = group.master_index()
            assert demoted is not None
            group.start_broker(old)
            assert wait_until(group.all_in_sync, UNTIL_S), "the old master never rejoined"
            fields = {"clusterName": "DefaultCluster", "brokerName": GROUP, "brokerId": str(old_id)}
            elected = ask(namesrv, RequestCode.CONTROLLER_ELECT_MASTER, fields | {"designateElect": "true"})
            assert elected.code == ResponseCode.SUCCESS, elected
            broker = group.brokers[demoted]
            assert broker is not None
            assert wait_until(lambda: any("check-back stopped" in line for line in broker.output), UNTIL_S)
