"""``sparkmq dev``: a NameServer and a Broker in one process, store under the project.

For local use and the main job: ``sparkmq dev`` prints
``dev namesrv 127.0.0.1:9876 broker 127.0.0.1:10911`` once both serve, followed by what it
started (store, flush mode, metrics endpoint) and how to connect (CLI, dashboard, Python).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from sparkmq.broker.controller import BrokerController
from sparkmq.cli.broker_command import add_broker_arguments, broker_config
from sparkmq.cli.service import run_service
from sparkmq.namesrv import NameServer, NamesrvConfig

DEFAULT_STORE_DIR = Path("data/store")


class DevCluster:
    """A NameServer and one broker registered with it; start/close in the right order."""

    def __init__(self, namesrv: NameServer, broker_config_without_namesrv: Any) -> None:
        self.namesrv = namesrv
        self._broker_config = broker_config_without_namesrv
        self.broker: BrokerController | None = None

    async def start(self) -> None:
        await self.namesrv.start()
        config = dataclasses.replace(self._broker_config, namesrv_addr=self.namesrv.address)
        self.broker = BrokerController(config)
        await self.broker.start()

    async def close(self) -> None:
        if self.broker is not None:
            await self.broker.close()
        await self.namesrv.close()

    def ready_line(self) -> str:
        """``dev namesrv H:P broker H:P`` (scripts parse this first line), then what runs and how to connect."""
        assert self.broker is not None
        ns, cfg = self.namesrv.address, self.broker.config
        lines = [
            f"dev namesrv {ns} broker {cfg.address}",
            f"  NameServer  {ns}",
            f"  broker      {cfg.broker_name} ({cfg.broker_cluster_name}) on {cfg.address}, store "
            f"{cfg.store_path_root_dir.resolve()}, {cfg.flush_disk_type.value}",
        ]
        if self.broker.metrics is not None:
            lines.append(f"  metrics     http://{self.broker.metrics.address}/metrics")
        lines += [
            "connect:",
            f"  export NAMESRV_ADDR={ns}",
            f"  sparkmq admin sendMessage -n {ns} -t demo -p 'hello'",
            f"  sparkmq admin consumeMessage -n {ns} -t demo",
            f"  sparkmq dashboard --namesrv {ns} --port 8080",
            f"  python: sparkmq.Producer('PID_demo', '{ns}') / sparkmq.PushConsumer('CID_demo', '{ns}')",
            "Ctrl-C stops both (the store is flushed and kept).",
        ]
        return "\n".join(lines)


def register(parser: argparse.ArgumentParser) -> None:
    """Add the ``dev`` subcommand's options to its ``parser``."""
    add_broker_arguments(parser)
    parser.add_argument("--namesrv-port", type=int, default=9876, help="NameServer port (0 picks a free one)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.store_dir is None:
        args.store_dir = DEFAULT_STORE_DIR
    broker = broker_config(args)
    # The NameServer serves TLS as the broker does (tlsEnable, tls.server.*): a TLS client talks TLS to both.
    namesrv = NameServer(NamesrvConfig(broker.broker_ip, args.namesrv_port, tls=broker.server_tls()))
    cluster = DevCluster(namesrv, broker)
    return run_service(cluster, ready_line_of=cluster.ready_line)
