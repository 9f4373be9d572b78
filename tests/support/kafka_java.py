"""Apache Kafka (KRaft mode, one combined broker + controller) from the ``make references`` cache.

>>> # with KafkaProcess.start(tmp) as kafka:
>>> #     spark.readStream.format("kafka").option("kafka.bootstrap.servers", kafka.bootstrap) ...
"""

from __future__ import annotations

import base64
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from support.rocketmq_java import MAKE_TARGET, JavaProcess, ReferencesMissing, classpath, free_port, missing_references

LOG4J = """log4j.rootLogger=WARN, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.server.KafkaRaftServer=INFO
"""
HEAP = ("-Xms512m", "-Xmx1g")


@dataclass
class KafkaProcess(JavaProcess):
    """``kafka.Kafka`` with ``process.roles=broker,controller`` on free loopback ports, its log under ``root``."""

    port: int = 0

    @classmethod
    def start(cls, root: Path, partitions: int = 4) -> KafkaProcess:
        missing = missing_references("kafka")
        if missing:
            raise ReferencesMissing(f"{missing} is missing: run `{MAKE_TARGET}`")
        home = root / "kafka"
        home.mkdir(parents=True, exist_ok=True)
        port, controller = free_port(), free_port()
        properties = home / "server.properties"
        properties.write_text(
            "\n".join(
                [
                    "process.roles=broker,controller",
                    "node.id=1",
                    f"controller.quorum.voters=1@127.0.0.1:{controller}",
                    f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
                    f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
                    "controller.listener.names=CONTROLLER",
                    "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                    f"log.dirs={home / 'logs'}",
                    f"num.partitions={partitions}",
                    "offsets.topic.replication.factor=1",
                    "transaction.state.log.replication.factor=1",
                    "transaction.state.log.min.isr=1",
                    "group.initial.rebalance.delay.ms=0",
                    "",
                ]
            )
        )
        (home / "log4j.properties").write_text(LOG4J)
        jvm = [*HEAP, f"-Dlog4j.configuration=file:{home / 'log4j.properties'}", "-cp", classpath("kafka")]
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        subprocess.run(
            ["java", *jvm, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(properties)],
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        )
        return cls.launch(
            [*jvm, "kafka.Kafka", str(properties)], home, ("Kafka Server started", port, "Kafka"), port=port
        )

    def create_topic(self, topic: str, partitions: int = 4) -> None:
        """``kafka-topics.sh --create`` (TopicCommand): the topic exists, its leaders elected, before a write."""
        command = ["java", "-Xmx256m", "-cp", classpath("kafka"), "org.apache.kafka.tools.TopicCommand"]
        done = subprocess.run(
            [*command, "--bootstrap-server", self.bootstrap, "--create", "--topic", topic]
            + ["--partitions", str(partitions), "--replication-factor", "1"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise RuntimeError(f"creating Kafka topic {topic} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"
