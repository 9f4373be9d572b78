"""``sparkmq admin COMMAND [options]``: mqadmin over the remoting protocol.

Example::

    $ sparkmq admin updateTopic -n 127.0.0.1:9876 -c DefaultCluster -t orders
    create topic to 127.0.0.1:10911 success.
    TopicConfig [topicName=orders, readQueueNums=8, writeQueueNums=8, perm=RW-, ...]
    $ sparkmq admin consumerProgress -n 127.0.0.1:9876 -g billing

A bad option prints the command's usage on stderr and exits 2; a failed call (an unreachable
NameServer, a broker's refusal) prints ``sparkmq admin <command>: <reason>`` and exits 1.

Against brokers with ``aclEnable=true`` every request is signed (ACL 1.0) with the credentials of
``--access-key`` / ``--secret-key`` (before the command name), else of ``SPARKMQ_ACCESS_KEY`` /
``SPARKMQ_SECRET_KEY`` (mqadmin reads them from its tools.yml); ``--tls`` connects over TLS.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from sparkmq.cli.admin_commands import COMMANDS as BROKER_COMMANDS
from sparkmq.cli.admin_controller_commands import CONTROLLER_COMMANDS
from sparkmq.client.admin_ext import AdminExt
from sparkmq.client.security import ClientSecurity
from sparkmq.errors import SparkmqError

NAMESRV_ENV = "NAMESRV_ADDR"  # mqadmin's default for -n
ACCESS_KEY_ENV, SECRET_KEY_ENV = "SPARKMQ_ACCESS_KEY", "SPARKMQ_SECRET_KEY"
COMMANDS = {**BROKER_COMMANDS, **CONTROLLER_COMMANDS}


def register(parser: argparse.ArgumentParser) -> None:
    """Add the ``admin`` subcommand's options to its ``parser``."""
    environ = os.environ
    parser.add_argument("--access-key", default=environ.get(ACCESS_KEY_ENV), help=f"ACL access key (${ACCESS_KEY_ENV})")
    parser.add_argument("--secret-key", default=environ.get(SECRET_KEY_ENV), help=f"ACL secret key (${SECRET_KEY_ENV})")
    parser.add_argument("--tls", action="store_true", help="connect over TLS")
    parser.add_argument("--tls-trust-cert", default=None, help="PEM file of the CA to trust (default: the system's)")
    commands = parser.add_subparsers(dest="admin_command", metavar="ADMIN_COMMAND", required=True)
    for name, (description, options, _run, defaults) in COMMANDS.items():
        sub = commands.add_parser(name, help=description, description=description)
        sub.set_defaults(own_parser=sub)
        for opt in options:
            kwargs: dict[str, Any] = {"dest": opt.long, "help": opt.help, "required": opt.required}
            if opt.value:
                kwargs["default"] = defaults.get(opt.long)
                kwargs["metavar"] = opt.long
            else:
                kwargs["action"] = "store_true"
            sub.add_argument(f"-{opt.short}", f"--{opt.long}", **kwargs)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # the controller commands need no NameServer: -a names where to ask
    namesrv = getattr(args, "namesrvAddr", None) or os.environ.get(NAMESRV_ENV)
    namesrv = namesrv or getattr(args, "controllerAddress", None)
    if not namesrv:
        sys.stderr.write(f"sparkmq admin {args.admin_command}: no NameServer: give -n host:port or set {NAMESRV_ENV}\n")
        return 1
    try:
        security = ClientSecurity.of(
            args.access_key, args.secret_key, tls=args.tls, trust_cert_path=args.tls_trust_cert
        )
        asyncio.run(_run(args, namesrv, security))
    except SparkmqError as exc:
        sys.stderr.write(f"sparkmq admin {args.admin_command}: {exc.remark}\n")
        return 1
    return 0


async def _run(args: argparse.Namespace, namesrv: str, security: ClientSecurity) -> None:
    command = COMMANDS[args.admin_command][2]
    async with AdminExt(namesrv, security=security) as admin:
        await command(admin, args, sys.stdout)
