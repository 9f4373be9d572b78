"""``sparkmq dashboard --namesrv ADDR --port 8080``: the web dashboard (starlette on uvicorn).

Prints ``dashboard listening on http://HOST:PORT`` once it serves; SIGTERM/SIGINT stop it.
Read-only unless ``--access-key``/``--secret-key`` (ACL credentials, passed to the client, which
signs every request with them) or ``--allow-writes``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket

import uvicorn
from starlette.applications import Starlette

from sparkmq.errors import ConfigError
from sparkmq.ops.dashboard import DashboardConfig, create_app

STARTUP_POLL_S = 0.05


def register(parser: argparse.ArgumentParser) -> None:
    """Add the ``dashboard`` subcommand's options to its ``parser``."""
    parser.add_argument(
        "--namesrv",
        default=os.environ.get("NAMESRV_ADDR"),
        help="NameServer address(es) host:port[;host:port] (default: $NAMESRV_ADDR)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to serve on")
    parser.add_argument("--port", type=int, default=8080, help="HTTP port (0 picks a free one)")
    parser.add_argument("--allow-writes", action="store_true", help="enable the send-a-test-message form")
    parser.add_argument("--access-key", default=None, help="ACL access key: requests are signed, writes allowed")
    parser.add_argument("--secret-key", default=None, help="ACL secret key (with --access-key)")
    parser.add_argument(
        "--lag-sample-interval",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="how often consumer lag is sampled for the chart",
    )
    parser.set_defaults(run=run, own_parser=parser)


def run(args: argparse.Namespace) -> int:
    if not args.namesrv:
        args.own_parser.error("--namesrv is required (or set NAMESRV_ADDR)")
    config = DashboardConfig(
        args.namesrv, args.allow_writes, args.lag_sample_interval, args.access_key, args.secret_key
    )
    try:
        app = create_app(config)
    except ConfigError as exc:
        args.own_parser.error(exc.remark)
    asyncio.run(serve(app, args.host, args.port))
    return 0


async def serve(app: Starlette, host: str, port: int) -> None:
    """Bind first (so port 0 is known), announce the address once uvicorn has started, serve until signalled."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    task = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
    while not server.started and not task.done():
        await asyncio.sleep(STARTUP_POLL_S)
    if server.started:
        print(f"dashboard listening on http://{host}:{sock.getsockname()[1]}", flush=True)
    try:
        await task
    finally:
        sock.close()
