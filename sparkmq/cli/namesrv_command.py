"""``sparkmq namesrv``: run a NameServer until SIGTERM/SIGINT.

Once bound it prints one line on stdout, flushed, naming the real port (``--port 0`` picks a
free one)::

    $ sparkmq namesrv --port 0
    namesrv listening on 127.0.0.1:40123
"""

from __future__ import annotations

import argparse
import ssl
import sys
from pathlib import Path

from sparkmq.cli.controller_command import controller_config, read_properties
from sparkmq.cli.service import run_service
from sparkmq.errors import ConfigError
from sparkmq.namesrv import NameServer, NamesrvConfig
from sparkmq.namesrv.config import DEFAULT_BROKER_EXPIRED_S, DEFAULT_PORT, DEFAULT_SCAN_INTERVAL_S
from sparkmq.remoting.limits import IDLE_TIMEOUT_S, ServerLimits
from sparkmq.remoting.tls import SERVER_MODES, ServerTls, server_context


def config_from_args(args: argparse.Namespace) -> NamesrvConfig:
    """The frozen config of the parsed options.

    >>> config_from_args(argparse.Namespace(host="0.0.0.0", port=0, scan_interval=1.0, broker_expired=5.0,
    ...                                     max_connections=None, idle_timeout=120.0, allow_takeover=False))
    NamesrvConfig(host='0.0.0.0', port=0, scan_interval_s=1.0, broker_expired_s=5.0)
    """
    limits = ServerLimits(max_connections=args.max_connections, idle_timeout_s=args.idle_timeout)
    properties = read_properties(getattr(args, "config", None), getattr(args, "set", None) or [])
    controller = None
    if properties.get("enableControllerInNamesrv", "false").strip().lower() == "true":
        controller = controller_config(properties, getattr(args, "controller_store_dir", None))
    return NamesrvConfig(
        args.host,
        args.port,
        args.scan_interval,
        args.broker_expired,
        limits=limits,
        guard_registrations=not args.allow_takeover,
        tls=_tls(args),
        controller=controller,
    )


def _tls(args: argparse.Namespace) -> ServerTls | None:
    cert, key = getattr(args, "tls_cert", None), getattr(args, "tls_key", None)
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        raise ConfigError("--tls-cert and --tls-key go together")
    try:
        return ServerTls(server_context(cert, key), args.tls_mode)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"--tls-cert / --tls-key cannot be loaded: {exc}") from exc


def run(args: argparse.Namespace) -> int:
    """Serve until signalled; exit code 0 after a clean close, 2 for a bad option."""
    try:
        config = config_from_args(args)
    except ConfigError as exc:
        print(f"sparkmq namesrv: {exc.remark}", file=sys.stderr)
        return 2
    namesrv = NameServer(config)
    return run_service(namesrv, ready_line_of=lambda: f"namesrv listening on {namesrv.address}")


def register(parser: argparse.ArgumentParser) -> None:
    """Add the ``namesrv`` subcommand's options to its ``parser``."""
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port; 0 picks a free one (default: {DEFAULT_PORT})"
    )
    parser.add_argument(
        "--scan-interval",
        type=float,
        default=DEFAULT_SCAN_INTERVAL_S,
        metavar="S",
        help=f"seconds between scans for silent brokers (default: {DEFAULT_SCAN_INTERVAL_S:g})",
    )
    parser.add_argument(
        "--broker-expired",
        type=float,
        default=DEFAULT_BROKER_EXPIRED_S,
        metavar="S",
        help=f"evict a broker silent this many seconds (default: {DEFAULT_BROKER_EXPIRED_S:g})",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=None,
        metavar="N",
        help="refuse connections beyond N (default: half the descriptor limit)",
    )
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=IDLE_TIMEOUT_S,
        metavar="S",
        help=f"close a connection silent this many seconds (default: {IDLE_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--allow-takeover",
        action="store_true",
        help="let a REGISTER_BROKER from another connection replace a live broker's address",
    )
    parser.add_argument("-c", "--config", type=Path, help="namesrv.conf (RocketMQ key=value properties)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a namesrv.conf key, e.g. --set enableControllerInNamesrv=true (repeatable)",
    )
    parser.add_argument("--controller-store-dir", type=Path, help="controllerStorePath of the embedded controller")
    parser.add_argument("--tls-cert", type=Path, help="serve TLS with this PEM certificate (and --tls-key)")
    parser.add_argument("--tls-key", type=Path, help="the certificate's unencrypted PEM key")
    parser.add_argument(
        "--tls-mode",
        choices=SERVER_MODES,
        default="permissive",
        help="permissive: TLS and plain clients (default); enforcing: TLS only",
    )
    parser.set_defaults(run=run)


__all__ = ["config_from_args", "register", "run"]
