"""``sparkmq proxy``: a gRPC endpoint for RocketMQ 5 clients in front of a NameServer's broker groups.

Once listening it prints one line on stdout, flushed, naming the real port (``--grpc-port 0``
picks a free one)::

    $ sparkmq proxy --namesrv 127.0.0.1:9876 --grpc-port 0
    proxy gRPC endpoint listening on 127.0.0.1:40123

``--acl-file`` checks every RPC against a plain_acl accounts file (a broker's ``aclEnable`` with its
``aclFile``); ``--access-key`` / ``--secret-key`` (else ``SPARKMQ_ACCESS_KEY`` / ``SPARKMQ_SECRET_KEY``)
sign what the proxy sends brokers with ``aclEnable``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from sparkmq.cli.service import run_service

DEFAULT_GRPC_PORT = 8081
ACCESS_KEY_ENV, SECRET_KEY_ENV = "SPARKMQ_ACCESS_KEY", "SPARKMQ_SECRET_KEY"


def run(args: argparse.Namespace) -> int:
    """Serve until signalled; 2 when the grpc extra is missing or an option is refused."""
    try:
        from sparkmq.broker.grpc.proxy import GrpcProxy
    except ImportError as exc:
        print(f"sparkmq proxy needs the grpc extra (pip install 'sparkmq[grpc]'): {exc}", file=sys.stderr)
        return 2
    from sparkmq.errors import ConfigError
    from sparkmq.protocol.acl_signing import SessionCredentials

    if bool(args.access_key) != bool(args.secret_key):
        print("sparkmq proxy: --access-key and --secret-key go together", file=sys.stderr)
        return 2
    credentials = SessionCredentials(args.access_key, args.secret_key) if args.access_key else None
    acl_file = Path(args.acl_file) if args.acl_file else None
    try:
        proxy = GrpcProxy(
            args.namesrv, args.host, args.grpc_port, args.invisible_ms, acl_file=acl_file, credentials=credentials
        )
    except ConfigError as exc:  # an --acl-file that cannot be read or parsed
        print(f"sparkmq proxy: {exc.remark}", file=sys.stderr)
        return 2
    return run_service(proxy, ready_line_of=lambda: f"proxy gRPC endpoint listening on {proxy.address}")


def register(parser: argparse.ArgumentParser) -> None:
    """Add the ``proxy`` subcommand's options to its ``parser``."""
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
    parser.add_argument(
        "--acl-file", default=None, metavar="FILE", help="check every RPC against this plain_acl accounts file"
    )
    environ = os.environ
    parser.add_argument(
        "--access-key", default=environ.get(ACCESS_KEY_ENV), help=f"ACL access key for the brokers (${ACCESS_KEY_ENV})"
    )
    parser.add_argument(
        "--secret-key", default=environ.get(SECRET_KEY_ENV), help=f"ACL secret key for the brokers (${SECRET_KEY_ENV})"
    )
    parser.set_defaults(run=run)
