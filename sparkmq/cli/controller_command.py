"""``sparkmq controller``: a standalone controller node (RocketMQ 5's ``ControllerStartup``).

Brokers in controller mode name it in ``controllerAddr``. Prints one ready line, flushed::

    $ sparkmq controller --port 0 --store-dir /var/lib/sparkmq/controller
    controller listening on 127.0.0.1:40125
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sparkmq.cli.service import run_service
from sparkmq.controller.config import DEFAULT_SCAN_NOT_ACTIVE_BROKER_INTERVAL_MS, ControllerConfig, parse_peers
from sparkmq.errors import ConfigError

DEFAULT_PORT = 9878  # the controller's port in RocketMQ's quick-start (controller.conf)


def controller_config(properties: dict[str, str], store_path: Path | None) -> ControllerConfig:
    """ControllerConfig from RocketMQ key names (``controllerStorePath``, ``scanNotActiveBrokerInterval``,
    ``enableElectUncleanMaster``, ``controllerDLegerGroup``, ``controllerDLegerPeers``,
    ``controllerDLegerSelfId``); ``store_path`` wins over ``controllerStorePath``.

    >>> controller_config({"enableElectUncleanMaster": "true"}, Path("c")).enable_elect_unclean_master
    True
    """
    unclean = properties.get("enableElectUncleanMaster", "false").strip().lower()
    if unclean not in ("true", "false"):
        raise ConfigError(f"enableElectUncleanMaster={unclean!r} is not true or false")
    interval = properties.get("scanNotActiveBrokerInterval", str(DEFAULT_SCAN_NOT_ACTIVE_BROKER_INTERVAL_MS))
    try:
        scan_ms = int(interval.strip())
    except ValueError as exc:
        raise ConfigError(f"scanNotActiveBrokerInterval={interval!r} is not a number of milliseconds") from exc
    path = store_path or Path(properties.get("controllerStorePath", "controller").strip())
    return ControllerConfig(
        path,
        scan_ms,
        unclean == "true",
        group=properties.get("controllerDLegerGroup", "group_controller").strip(),
        peers=parse_peers(properties.get("controllerDLegerPeers", "")),
        self_id=properties.get("controllerDLegerSelfId", "n0").strip(),
    )


def read_properties(config: Path | None, pairs: list[str]) -> dict[str, str]:
    """A properties file, then ``--set`` pairs."""
    if config is None and not pairs:
        return {}
    from sparkmq.broker.config import parse_properties  # a NameServer without a config file does without it

    properties = parse_properties(config.read_text(encoding="utf-8"), str(config)) if config else {}
    for pair in pairs:
        properties.update(parse_properties(pair, source=f"--set {pair}"))
    return properties


def run(args: argparse.Namespace) -> int:
    try:
        config = controller_config(read_properties(args.config, args.set), args.store_dir)
    except (ConfigError, OSError) as exc:
        print(f"sparkmq controller: {exc}", file=sys.stderr)
        return 2
    from sparkmq.controller import ControllerServer

    server = ControllerServer(config, args.host, args.port)
    return run_service(server, ready_line_of=lambda: f"controller listening on {server.address}")


def register(parser: argparse.ArgumentParser) -> None:
    """Add the ``controller`` subcommand's options to its ``parser``."""
    parser.add_argument("-c", "--config", type=Path, help="controller.conf (RocketMQ key=value properties)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port; 0 picks a free one ({DEFAULT_PORT})")
    parser.add_argument("--store-dir", type=Path, help="controllerStorePath: controller.json or the Raft journal")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a controller.conf key")
    parser.set_defaults(run=run)


__all__ = ["controller_config", "read_properties", "register", "run"]
