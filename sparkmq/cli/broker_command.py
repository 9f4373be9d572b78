"""``sparkmq broker``: one broker, configured by broker.conf and flags (flags win)."""

from __future__ import annotations

import argparse
from pathlib import Path

from sparkmq.broker.config import BrokerConfig, parse_properties
from sparkmq.broker.controller import BrokerController
from sparkmq.cli.service import run_service
from sparkmq.errors import ConfigError
from sparkmq.store.config import FlushDiskType


def register(parser: argparse.ArgumentParser) -> None:
    """Add the ``broker`` subcommand's options to its ``parser``."""
    add_broker_arguments(parser)
    parser.set_defaults(run=run)


def add_broker_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--config", type=Path, help="broker.conf (RocketMQ key=value properties)")
    parser.add_argument("--namesrv", help="NameServer address(es), host:port[;host:port]")
    parser.add_argument("--host", help="brokerIP1: the address clients are told to connect to")
    parser.add_argument("--port", type=int, help="listenPort (0 picks a free port)")
    parser.add_argument("--store-dir", type=Path, help="storePathRootDir")
    parser.add_argument("--flush", choices=("sync", "async"), help="flushDiskType")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any broker.conf key, e.g. --set autoCreateTopicEnable=false (repeatable)",
    )


def broker_config(args: argparse.Namespace) -> BrokerConfig:
    """broker.conf, then ``--set`` pairs, then the dedicated flags."""
    properties = parse_properties(args.config.read_text(encoding="utf-8"), str(args.config)) if args.config else {}
    for pair in args.set:  # one at a time: a value ending in a backslash must not swallow the next pair
        properties.update(parse_properties(pair, source=f"--set {pair}"))
    flush = {"sync": FlushDiskType.SYNC_FLUSH, "async": FlushDiskType.ASYNC_FLUSH}.get(args.flush or "")
    acl_file = args.config.parent / "plain_acl.yml" if args.config and "aclFile" not in properties else None
    return BrokerConfig.from_properties(
        properties,
        namesrv_addr=args.namesrv,
        broker_ip=args.host,
        listen_port=args.port,
        store_path_root_dir=args.store_dir,
        flush_disk_type=flush,
        acl_file=acl_file,
        config_file=args.config,
    )


def run(args: argparse.Namespace) -> int:
    try:
        config = broker_config(args)
    except (ConfigError, OSError) as exc:
        raise SystemExit(f"sparkmq broker: {exc}") from exc
    controller = BrokerController(config)
    return run_service(controller, ready_line_of=lambda: f"broker listening on {controller.config.address}")
