"""Issue 13: the real C++ client (PyPI rocketmq 0.4.4) against a broker with ``aclEnable=true``.

Right credentials (``set_session_credentials``) send, pull and push-consume; a wrong secret and no
credentials at all (the library then signs with AccessKey "") are refused with NO_PERMISSION and
the broker's remark, which the library logs.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.processes import BrokerProcess, NamesrvProcess
from support.rocketmq_cpp import CppClientRun, require_cpp_python

ACCOUNTS = """\
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
"""
RIGHT = ("--access-key", "RocketMQ", "--secret-key", "12345678")
TIMEOUT_S = 90.0


@pytest.fixture(scope="module")
def acl_namesrv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require_cpp_python()
    root = tmp_path_factory.mktemp("cpp-acl")
    (root / "plain_acl.yml").write_text(ACCOUNTS)
    with (
        NamesrvProcess.start() as namesrv,
        BrokerProcess.start(
            root / "store", namesrv.address, "--set", "aclEnable=true", "--set", f"aclFile={root / 'plain_acl.yml'}"
        ),
    ):
        yield namesrv.address


def run(home: Path, command: str, namesrv: str, topic: str, *extra: str) -> CppClientRun:
    return CppClientRun.start(home, command, "--namesrv", namesrv, "--topic", topic, "--group", f"G_{topic}", *extra)


def failed_run(home: Path, namesrv: str, *extra: str) -> str:
    """Run a producer expected to fail on an existing topic; the library's log (it keeps the broker's remark).

    The exception the wrapper raises only says "No route info of this topic" after the retries;
    the log has each refusal: ``processSendResponse error remark:<remark>, error code:16``.
    """
    topic = f"CppAcl_{uuid.uuid4().hex[:10]}"
    run(home / "create", "produce", namesrv, topic, "--count", "1", *RIGHT).finish(TIMEOUT_S)  # auto-creates it
    client = run(home, "produce", namesrv, topic, "--count", "1", *extra)
    try:
        client.process.wait(TIMEOUT_S)
    finally:
        client.kill()
    assert client.process.returncode != 0, client.describe()
    assert not client.events("sent")
    return "\n".join(path.read_text(errors="replace") for path in (home / "logs").rglob("*.log*"))


def test_right_credentials_send_pull_and_push(acl_namesrv: str, tmp_path: Path) -> None:
    topic = f"CppAcl_{uuid.uuid4().hex[:10]}"
    sent = [
        r
        for r in run(tmp_path, "produce", acl_namesrv, topic, "--count", "30", *RIGHT).finish(TIMEOUT_S)
        if r.get("event") == "sent"
    ]
    assert len(sent) == 30 and all(r["status"] == 0 for r in sent)
    pulled = run(tmp_path, "pull-consume", acl_namesrv, topic, "--count", "30", *RIGHT).finish(TIMEOUT_S)
    assert len([r for r in pulled if r.get("event") == "received"]) == 30
    pushed = CppClientRun.start(
        tmp_path / "push",
        "push-consume",
        "--namesrv",
        acl_namesrv,
        "--topic",
        topic,
        "--group",
        f"CID_{topic}",
        "--count",
        "30",
        *RIGHT,
    ).finish(TIMEOUT_S)
    assert len({(r["queue_id"], r["queue_offset"]) for r in pushed if r.get("event") == "received"}) == 30


def test_wrong_secret_is_refused(acl_namesrv: str, tmp_path: Path) -> None:
    log = failed_run(tmp_path, acl_namesrv, "--access-key", "RocketMQ", "--secret-key", "wrong-secret")
    assert "remark:Check signature failed for accessKey=RocketMQ, error code:16" in log


def test_no_credentials_are_refused(acl_namesrv: str, tmp_path: Path) -> None:
    log = failed_run(tmp_path, acl_namesrv)
    assert "remark:No acl config for , error code:16" in log  # the library still signs, with AccessKey ""
