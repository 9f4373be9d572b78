"""mqadmin's controller-mode commands (RocketMQ 5): getControllerMetaData, getSyncStateSet, getBrokerEpoch,
electMaster, with Java's options and output lines."""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from sparkmq.cli.admin_commands import CLUSTER, Command, N, Opt
from sparkmq.client.admin_ext import AdminExt
from sparkmq.errors import RemoteError
from sparkmq.protocol import RequestCode
from sparkmq.protocol.controller_bodies import (
    BrokerReplicasInfo,
    ElectMasterResponseBody,
    EpochEntry,
    EpochEntryCache,
    ReplicaIdentity,
)

CONTROLLER = Opt("a", "controllerAddress", "the address of controller", required=True)


def replica_text(r: ReplicaIdentity) -> str:
    """``ReplicaIdentity.toString``."""
    alive = str(r.alive).lower()
    return f"ReplicaIdentity{{brokerName='{r.broker_name}', brokerId={r.broker_id}, brokerAddress='{r.broker_address}', alive={alive}}}"  # noqa: E501


def epoch_text(e: EpochEntry) -> str:
    """``EpochEntry.toString``."""
    return f"EpochEntry{{epoch={e.epoch}, startOffset={e.start_offset}, endOffset={e.end_offset}}}"


async def get_controller_metadata(admin: AdminExt, args: argparse.Namespace, out: TextIO) -> None:
    fields = (await admin.broker(args.controllerAddress, RequestCode.CONTROLLER_GET_METADATA_INFO)).ext_fields
    out.write(f"\n#ControllerGroup\t{fields.get('group', '')}")
    out.write(f"\n#ControllerLeaderId\t{fields.get('controllerLeaderId', '')}")
    out.write(f"\n#ControllerLeaderAddress\t{fields.get('controllerLeaderAddress', '')}")
    for peer in filter(None, fields.get("peers", "").split(";")):
        out.write(f"\n#Peer:\t{peer}")
    out.write("\n")


async def _broker_names(admin: AdminExt, args: argparse.Namespace) -> list[str]:
    if getattr(args, "brokerName", None):
        return [args.brokerName.strip()]
    if getattr(args, "clusterName", None):
        info = await admin.cluster_info()
        if args.clusterName not in info.cluster_addr_table:
            raise RemoteError(f"cluster {args.clusterName} is not known to the NameServer")
        return sorted(info.cluster_addr_table[args.clusterName])
    raise RemoteError("give -b brokerName or -c clusterName")


async def get_sync_state_set(admin: AdminExt, args: argparse.Namespace, out: TextIO) -> None:
    body = json.dumps(await _broker_names(admin, args)).encode()
    response = await admin.broker(args.controllerAddress, RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, body=body)
    table = BrokerReplicasInfo.decode(response.body).replicas_info_table
    for name, info in sorted(table.items()):
        out.write(
            f"\n#brokerName\t{name}\n#MasterBrokerId\t{info.master_broker_id}\n#MasterAddr\t{info.master_address}"
            f"\n#MasterEpoch\t{info.master_epoch}\n#SyncStateSetEpoch\t{info.sync_state_set_epoch}"
            f"\n#SyncStateSetNums\t{len(info.in_sync_replicas)}\n"
        )
        for member in info.in_sync_replicas:
            out.write(f"\nInSyncReplica:\t{replica_text(member)}\n")
        for member in info.not_in_sync_replicas:
            out.write(f"\nNotInSyncReplica:\t{replica_text(member)}\n")


async def get_broker_epoch(admin: AdminExt, args: argparse.Namespace, out: TextIO) -> None:
    info = await admin.cluster_info()
    addresses: list[str] = []
    for name in await _broker_names(admin, args):
        group = info.broker_addr_table.get(name)
        if group is not None:
            addresses += [group.broker_addrs[i] for i in sorted(group.broker_addrs)]
    for address in addresses:
        cache = EpochEntryCache.decode((await admin.broker(address, RequestCode.GET_BROKER_EPOCH_CACHE)).body)
        out.write(
            f"\n#clusterName\t{cache.cluster_name}\n#brokerName\t{cache.broker_name}\n#brokerAddr\t{address}"
            f"\n#brokerId\t{cache.broker_id}"
        )
        for i, entry in enumerate(cache.epoch_list):
            if i == len(cache.epoch_list) - 1:
                entry = EpochEntry(entry.epoch, entry.start_offset, cache.max_offset)
            out.write(f"\n#Epoch: {epoch_text(entry)}")
        out.write("\n")


async def elect_master(admin: AdminExt, args: argparse.Namespace, out: TextIO) -> None:
    fields = {
        "clusterName": args.clusterName.strip(),
        "brokerName": args.brokerName.strip(),
        "brokerId": args.brokerId.strip(),
        "designateElect": "true",
    }
    response = await admin.broker(args.controllerAddress, RequestCode.CONTROLLER_ELECT_MASTER, fields)
    answer = response.ext_fields
    out.write(f"\n#ClusterName\t{args.clusterName}")
    out.write(f"\n#BrokerName\t{args.brokerName}")
    out.write(f"\n#BrokerMasterAddr\t{answer.get('masterAddress', '')}")
    out.write(f"\n#MasterEpoch\t{answer.get('masterEpoch', '')}")
    out.write(f"\n#SyncStateSetEpoch\t{answer.get('syncStateSetEpoch', '')}\n")
    if response.body:
        for broker_id, address in sorted(ElectMasterResponseBody.decode(response.body).broker_addrs.items()):
            out.write(f"\t#Broker\t{broker_id}\t{address}\n")


BROKER_NAME = Opt("b", "brokerName", "which broker to fetch")
CONTROLLER_COMMANDS: dict[str, tuple[str, tuple[Opt, ...], Command, dict[str, Any]]] = {
    "getControllerMetaData": ("Get controller cluster's metadata.", (N, CONTROLLER), get_controller_metadata, {}),
    "getSyncStateSet": (
        "Fetch syncStateSet for target brokers.",
        (N, CONTROLLER, CLUSTER, BROKER_NAME),
        get_sync_state_set,
        {},
    ),
    "getBrokerEpoch": ("Fetch broker epoch entries.", (N, CLUSTER, BROKER_NAME), get_broker_epoch, {}),
    "electMaster": (
        "Re-elect the specified broker as master.",
        (
            N,
            CONTROLLER,
            Opt("b", "brokerId", "The id of the broker which requires to become master", required=True),
            Opt("bn", "brokerName", "The broker name of the replicas that require to be manipulated", required=True),
            Opt("c", "clusterName", "the clusterName of broker", required=True),
        ),
        elect_master,
        {},
    ),
}
