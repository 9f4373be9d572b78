"""The controller's state machine (ReplicasInfoManager) on its own: ids, registration, elections, SyncStateSet."""

from __future__ import annotations

from sparkmq.controller.replicas import ReplicasInfoManager
from sparkmq.protocol import ResponseCode
from sparkmq.protocol.controller_bodies import ElectMasterResponseBody, SyncStateSet

CLUSTER, NAME = "DefaultCluster", "broker-a"


def group_of_three(alive: set[int], offsets: dict[int, int] | None = None) -> ReplicasInfoManager:
    manager = ReplicasInfoManager()
    for broker_id in (1, 2, 3):
        assert manager.next_broker_id(CLUSTER, NAME).fields["nextBrokerId"] == str(broker_id)
        assert manager.apply_broker_id(CLUSTER, NAME, broker_id, f"10.0.0.{broker_id}:10911;1").code == 0
    first = manager.elect_master(NAME, 1, False, lambda c, n, i: i in alive, lambda c, n, i: None)
    assert first.code == 0 and first.fields["masterBrokerId"] == "1" and first.fields["masterEpoch"] == "1"
    assert manager.alter_sync_state_set(NAME, 1, 1, SyncStateSet(frozenset({1, 2, 3}), 1), lambda *a: True).code == 0
    return manager


def test_a_broker_id_belongs_to_the_broker_that_applied_for_it() -> None:
    manager = ReplicasInfoManager()
    assert manager.apply_broker_id(CLUSTER, NAME, 2, "a:1;1").code == ResponseCode.CONTROLLER_BROKER_ID_INVALID
    assert manager.apply_broker_id(CLUSTER, NAME, 1, "a:1;1").code == 0
    assert manager.apply_broker_id(CLUSTER, NAME, 1, "a:1;1").code == 0  # the same broker again
    assert manager.apply_broker_id(CLUSTER, NAME, 1, "b:1;2").code == ResponseCode.CONTROLLER_BROKER_ID_INVALID


def test_the_election_picks_the_live_sync_state_set_member_with_the_highest_epoch_then_offset() -> None:
    manager = group_of_three({1, 2, 3})
    live = {2: (1, 500, 0), 3: (1, 900, 0)}
    outcome = manager.elect_master(NAME, None, False, lambda c, n, i: i in live, lambda c, n, i: live.get(i))
    assert outcome.code == 0 and outcome.changed
    assert outcome.fields == {
        "masterBrokerId": "3",
        "masterAddress": "10.0.0.3:10911",
        "masterEpoch": "2",
        "syncStateSetEpoch": "3",
    }
    assert ElectMasterResponseBody.decode(outcome.body).sync_state_set == {3}
    state = manager.replica_info(NAME)
    assert state.fields["masterBrokerId"] == "3" and SyncStateSet.decode(state.body) == SyncStateSet(frozenset({3}), 3)


def test_no_unclean_election_by_default_and_one_when_enabled() -> None:
    manager = group_of_three({1, 2, 3})
    assert manager.alter_sync_state_set(NAME, 1, 1, SyncStateSet(frozenset({1}), 2), lambda *a: True).code == 0
    alive = lambda c, n, i: i == 2  # noqa: E731
    refused = manager.elect_master(NAME, None, False, alive, lambda c, n, i: (1, 0, 0))
    assert refused.code == ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE
    assert manager.replica_info(NAME).fields.get("masterBrokerId") is None
    designated = manager.elect_master(NAME, 2, True, alive, lambda c, n, i: (1, 0, 0))
    assert designated.code == ResponseCode.CONTROLLER_ELECT_MASTER_FAILED
    manager.enable_elect_unclean_master = True
    unclean = manager.elect_master(NAME, 2, True, alive, lambda c, n, i: (1, 0, 0))
    assert unclean.code == 0 and unclean.fields["masterBrokerId"] == "2"


def test_alter_sync_state_set_is_fenced_by_master_and_epochs() -> None:
    manager = group_of_three({1, 2, 3})
    alive = lambda *a: True  # noqa: E731
    proposal = SyncStateSet(frozenset({1, 2}), 2)
    assert manager.alter_sync_state_set(NAME, 2, 1, proposal, alive).code == ResponseCode.CONTROLLER_INVALID_MASTER
    fenced = manager.alter_sync_state_set(NAME, 1, 0, proposal, alive)
    assert fenced.code == ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH
    stale = manager.alter_sync_state_set(NAME, 1, 1, SyncStateSet(frozenset({1, 2}), 1), alive)
    assert stale.code == ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
    dead = manager.alter_sync_state_set(NAME, 1, 1, proposal, lambda c, n, i: i != 2)
    assert dead.code == ResponseCode.CONTROLLER_BROKER_NOT_ALIVE
    accepted = manager.alter_sync_state_set(NAME, 1, 1, proposal, alive)
    assert accepted.code == 0 and SyncStateSet.decode(accepted.body) == SyncStateSet(frozenset({1, 2}), 3)


def test_the_tables_survive_a_round_trip_through_json() -> None:
    manager = group_of_three({1, 2, 3})
    again = ReplicasInfoManager()
    again.load_json(manager.to_json())
    assert again.groups == manager.groups
