"""``sparkmq proxy``: a gRPC endpoint for RocketMQ 5 clients in front of a NameServer's broker groups.

Once listening it prints one line on stdout, flushed, naming the real port (``--grpc-port 0``
picks a free one)::

    $ sparkmq proxy --namesrv 127.0.0.1:9876 --grpc-port 0
    proxy gRPC endpoint listening on 127.0.0.1:40123
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from sparkmq.cli.service import run_service

DEFAULT_GRPC_PORT = 8081


def run(args: argparse.Namespace) -> int:
    """Serve until signalled; 2 when the grpc extra is missing."""
    try:
        from sparkmq.broker.grpc.proxy import GrpcProxy
    except ImportError as exc:
        print(f"sparkmq proxy needs the grpc extra (pip install 'sparkmq[grpc]'): {exc}", file=sys.stderr)
        return 2
    proxy = GrpcProxy(args.namesrv, args.host, args.grpc_port, args.invisible_ms)
    return run_service(proxy, ready_line_of=lambda: f"proxy gRPC endpoint listening on {proxy.address}")


def register(subcommands: Any) -> None:
    """Add the ``proxy`` subcommand to ``subcommands`` (an argparse sub-parsers action)."""
    parser: argparse.ArgumentParser = subcommands.add_parser(
        "proxy", help="serve RocketMQ 5 (gRPC) clients in front of the broker groups of a NameServer"
    )
    parser.add_argument("--namesrv", required=True, metavar="HOST:PORT", help="NameServer address(es), ';'-separated")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument(
        "--grpc-port",
        type=int,
        default=DEFAULT_GRPC_PORT,
        help=f"gRPC port; 0 picks a free one (default: {DEFAULT_GRPC_PORT})",
    )
    parser.add_argument(
        "--invisible-ms",
        type=int,
        default=60_000,
        metavar="MS",
        help="invisible time of a receive that names none, auto-renewed (default: 60000)",
    )
    parser.set_defaults(run=run)
