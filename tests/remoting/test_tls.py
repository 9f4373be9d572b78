"""TLS on the remoting port (issue 13): permissive serves TLS and plain clients on one port, enforcing
only TLS; a full produce/pull round trip with sparkmq's clients over TLS (NameServer and broker).

A throwaway self-signed certificate for 127.0.0.1 is made per module with the ``openssl`` CLI.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import struct
import subprocess
from pathlib import Path

import pytest

from sparkmq.broker.controller import BrokerController
from sparkmq.client.message import Message, decode_pull_body
from sparkmq.client.producer import AsyncProducer
from sparkmq.client.pull_consumer import AsyncPullConsumer
from sparkmq.client.security import ClientSecurity
from sparkmq.connector.driver_view import DriverView
from sparkmq.errors import ConfigError, RemoteError
from sparkmq.namesrv.config import NamesrvConfig
from sparkmq.namesrv.server import NameServer
from sparkmq.protocol import FrameDecoder, RemotingCommand, RequestCode, ResponseCode
from sparkmq.remoting import RemotingClient
from sparkmq.remoting.tls import (
    TLS_HANDSHAKE_RECORD,
    ServerTls,
    client_context,
    server_context,
)
from support.broker_wire import small_config
from support.processes import NamesrvProcess


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(certificate, key) PEM files: self-signed, for IP 127.0.0.1, valid one day."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise AssertionError("the openssl CLI is needed to make the test certificate")
    root = tmp_path_factory.mktemp("tls")
    cert_path, key_path = root / "cert.pem", root / "key.pem"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            str(key_path),
            "-out",
            str(cert_path),
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    return cert_path, key_path


def tls_config(tmp_path: Path, cert: tuple[Path, Path], mode: str, **overrides: object):
    return small_config(
        tmp_path / "store",
        tls_enable=True,
        tls_server_mode=mode,
        tls_server_cert_path=cert[0],
        tls_server_key_path=cert[1],
        **overrides,
    )


async def max_offset(client: RemotingClient, address: str) -> RemotingCommand:
    return await client.invoke(address, RequestCode.GET_MAX_OFFSET, {"topic": "T", "queueId": "0"}, timeout=5.0)


def raw_tls_exchange(port: int, trust: Path) -> tuple[str, int]:
    """A blocking stdlib TLS socket: handshake, one GET_MAX_OFFSET frame, its answer. (TLS version, code)."""
    context = client_context(trust)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(
            RemotingCommand.request(RequestCode.GET_MAX_OFFSET, 1, ext_fields={"topic": "T", "queueId": "0"}).encode()
        )
        decoder = FrameDecoder()
        while not (commands := decoder.feed(tls.recv(65536))):
            pass
        return str(tls.version()), commands[0].code


def test_permissive_serves_tls_and_plain_clients_on_one_port(tmp_path: Path, cert: tuple[Path, Path]) -> None:
    async def main() -> None:
        async with BrokerController(tls_config(tmp_path, cert, "permissive")) as broker:
            address = broker.config.address
            tls_client, plain_client = RemotingClient(ssl=client_context(cert[0])), RemotingClient()
            try:
                assert (await max_offset(tls_client, address)).code == ResponseCode.SUCCESS
                assert (await max_offset(plain_client, address)).code == ResponseCode.SUCCESS
            finally:
                await tls_client.close()
                await plain_client.close()
            version, code = await asyncio.to_thread(raw_tls_exchange, broker.config.listen_port, cert[0])
            assert version.startswith("TLSv1.") and code == ResponseCode.SUCCESS

    asyncio.run(main())


def test_enforcing_refuses_plain_clients(tmp_path: Path, cert: tuple[Path, Path]) -> None:
    async def main() -> None:
        async with BrokerController(tls_config(tmp_path, cert, "enforcing")) as broker:
            address = broker.config.address
            tls_client, plain_client = RemotingClient(ssl=client_context(cert[0])), RemotingClient()
            try:
                assert (await max_offset(tls_client, address)).code == ResponseCode.SUCCESS
                with pytest.raises(RemoteError):  # the server closes the plain connection: no answer
                    await max_offset(plain_client, address)
            finally:
                await tls_client.close()
                await plain_client.close()

    asyncio.run(main())


def test_tls_client_refuses_an_untrusted_server(tmp_path: Path, cert: tuple[Path, Path]) -> None:
    async def main() -> None:
        async with BrokerController(tls_config(tmp_path, cert, "permissive")) as broker:
            client = RemotingClient(ssl=client_context())  # system CAs only: the self-signed cert is unknown
            try:
                with pytest.raises(RemoteError, match="CERTIFICATE_VERIFY_FAILED"):
                    await max_offset(client, broker.config.address)
            finally:
                await client.close()

    asyncio.run(main())


def test_produce_and_pull_over_tls_with_acl(tmp_path: Path, cert: tuple[Path, Path]) -> None:
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text("accounts:\n  - accessKey: tlsUser01\n    secretKey: tlsSecret01\n    admin: true\n")
    security = ClientSecurity.of("tlsUser01", "tlsSecret01", tls=True, trust_cert_path=cert[0])

    async def main() -> None:
        namesrv_tls = ServerTls(server_context(*cert), "permissive")
        async with NameServer(NamesrvConfig("127.0.0.1", port=0, tls=namesrv_tls)) as namesrv:
            config = tls_config(
                tmp_path,
                cert,
                "enforcing",
                namesrv_addr=f"127.0.0.1:{namesrv.port}",
                acl_enable=True,
                acl_file=acl_file,
            )
            async with BrokerController(config) as broker:
                assert broker.acl is not None
                producer = AsyncProducer("PID_tls", f"127.0.0.1:{namesrv.port}", security=security)
                consumer = AsyncPullConsumer("CID_tls", f"127.0.0.1:{namesrv.port}", security=security)
                await producer.start()
                await consumer.start()
                try:
                    result = await producer.send(Message("TlsTopic", b"over tls"))
                    pulled = await consumer.pull_raw(result.queue, result.queue_offset, 8)
                    assert [m.body for m in decode_pull_body(pulled.body, "broker-a")] == [b"over tls"]
                finally:
                    await consumer.close()
                    await producer.close()
                assert broker.acl.denied == 0

    asyncio.run(main())


def test_spark_driver_view_over_tls_with_acl(tmp_path: Path, cert: tuple[Path, Path]) -> None:
    """The Spark source's driver side (blocking sockets, ``DriverView``) signs and encrypts like the client:
    routes from a NameServer over TLS, offsets and a commit from an enforcing TLS + ACL broker."""
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text("accounts:\n  - accessKey: tlsUser01\n    secretKey: tlsSecret01\n    admin: true\n")
    security = ClientSecurity.of("tlsUser01", "tlsSecret01", tls=True, trust_cert_path=cert[0])

    async def main() -> None:
        namesrv_tls = ServerTls(server_context(*cert), "permissive")  # the broker registers in plain text
        async with NameServer(NamesrvConfig("127.0.0.1", port=0, tls=namesrv_tls)) as namesrv:
            address = f"127.0.0.1:{namesrv.port}"
            config = tls_config(tmp_path, cert, "enforcing", namesrv_addr=address, acl_enable=True, acl_file=acl_file)
            async with BrokerController(config) as broker:
                assert broker.acl is not None
                producer = AsyncProducer("PID_tls_driver", address, security=security)
                await producer.start()
                try:
                    sent = await producer.send(Message("TlsDriverTopic", b"over tls"))
                finally:
                    await producer.close()
                view = DriverView(address, "CID_tls_driver", security)
                try:  # blocking calls: in a thread, so this loop keeps serving them
                    queues = await asyncio.to_thread(view.queues, ["TlsDriverTopic"])
                    assert sent.queue in queues
                    maxes = await asyncio.to_thread(view.max_offsets, queues)
                    assert maxes[sent.queue] == sent.queue_offset + 1
                    await asyncio.to_thread(view.commit, {sent.queue: sent.queue_offset + 1})
                    committed = await asyncio.to_thread(view.committed, [sent.queue])
                    assert committed == {sent.queue: sent.queue_offset + 1}
                finally:
                    view.close()
                assert broker.acl.denied == 0

    asyncio.run(main())


def test_unloadable_certificate_refuses_the_start(tmp_path: Path) -> None:
    missing = tmp_path / "missing.pem"
    with pytest.raises(ConfigError, match="tls.server.certPath / keyPath cannot be loaded"):
        BrokerController(
            small_config(tmp_path / "store", tls_enable=True, tls_server_cert_path=missing, tls_server_key_path=missing)
        )
    with pytest.raises(ConfigError, match="needs tls.server.certPath"):
        small_config(tmp_path / "store", tls_enable=True)


def test_tls_record_and_frame_first_bytes_differ() -> None:
    """What the permissive sniffing relies on: a frame's first byte is 0 below 16 MiB; TLS starts with 0x16."""
    frame = RemotingCommand.request(RequestCode.HEART_BEAT, 1, body=b"x" * 1000).encode()
    assert frame[0] == 0 and struct.unpack(">I", frame[:4])[0] < 0x16000000
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    hello = client_context().wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with pytest.raises(ssl.SSLWantReadError):
        hello.do_handshake()
    assert outgoing.read()[0] == TLS_HANDSHAKE_RECORD


def test_namesrv_command_serves_tls(cert: tuple[Path, Path]) -> None:
    """``sparkmq namesrv --tls-cert --tls-key --tls-mode enforcing``: a TLS client is answered."""
    with NamesrvProcess.start("--tls-cert", str(cert[0]), "--tls-key", str(cert[1]), "--tls-mode", "enforcing") as ns:

        async def ask() -> int:
            client = RemotingClient(ssl=client_context(cert[0]))
            try:
                response = await client.invoke(
                    ns.address, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Nothing"}, timeout=5.0
                )
            finally:
                await client.close()
            return response.code

        assert asyncio.run(ask()) == ResponseCode.TOPIC_NOT_EXIST


def test_permissive_survives_bad_handshakes_and_silent_peers(tmp_path: Path, cert: tuple[Path, Path]) -> None:
    """A junk ClientHello and a peer that connects and leaves are dropped; everyone else is served."""

    async def main() -> None:
        async with BrokerController(tls_config(tmp_path, cert, "permissive")) as broker:
            port = broker.config.listen_port
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"\x16\x03\x01\x00\x05hello")  # a TLS record header, then no ClientHello
            assert await asyncio.wait_for(reader.read(), 10) == b""  # the server hangs up
            writer.close()
            await writer.wait_closed()
            _, silent = await asyncio.open_connection("127.0.0.1", port)
            silent.close()  # leaves before its first byte
            await silent.wait_closed()
            for client in (RemotingClient(), RemotingClient(ssl=client_context(cert[0]))):
                try:
                    assert (await max_offset(client, broker.config.address)).code == ResponseCode.SUCCESS
                finally:
                    await client.close()

    asyncio.run(main())
