"""ACL 1.0 (plain_acl.yml) on both brokers: the Java client 4.9.7 signing as an admin, a read-only account,
a wrong secret and an unknown key; what each is allowed and the codes of what each is refused must match.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from support.reference_pair import SIDES, BrokerPair, broker_pair, comparable
from support.rocketmq_java import Record

ACCOUNTS = """\
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: RocketMQ
    secretKey: "12345678"
    admin: true
  - accessKey: readonly
    secretKey: "12345678"
    admin: false
    defaultTopicPerm: SUB
    defaultGroupPerm: SUB
    topicPerms:
      - AclRun_aclDenied=DENY
"""


@pytest.fixture(scope="module")
def acl_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, list[Record]]]:
    pair: BrokerPair
    with broker_pair(tmp_path_factory.mktemp("acl-differential"), acl=ACCOUNTS) as pair:
        runs = pair.run("AclRun", ["acl"], credentials=("RocketMQ", "12345678"))
        yield {side: runs[side]["acl"] for side in SIDES}


ACL_REFUSAL = re.compile(
    r"CODE: 1  DESC: org\.apache\.rocketmq\.acl\.common\.AclException: (.*?), org\.apache\S+ BROKER"
)


def _as_sparkmq_words(record: Record) -> Record:
    """An Apache refusal in sparkmq's words (docs/compatibility.md): 4.9.7 answers SYSTEM_ERROR (1) with the
    AclException and its top stack frame as the remark; sparkmq NO_PERMISSION (16) with the message alone,
    and "No permission for" where 4.9.7 also says "No default permission for" of a listed resource."""
    match = ACL_REFUSAL.search(record.get("message", ""))
    if record["event"] != "failed" or record["code"] != 1 or match is None:
        return record
    return {
        **record,
        "code": 16,
        "message": record["message"].replace(match.group(0), f"CODE: 16  DESC: {match.group(1)} BROKER"),
    }


def test_acl_allows_and_refuses_the_same_requests(acl_runs: dict[str, list[Record]]) -> None:
    apache, ours = (acl_runs[side] for side in SIDES)
    assert apache[-1]["event"] == "done" and ours[-1]["event"] == "done", (apache[-2:], ours[-2:])
    outcomes = {
        side: {
            r.get("what") or r.get("expr"): r.get("code", r.get("status"))
            for r in records
            if r["event"] in ("failed", "pulled")
        }
        for side, records in acl_runs.items()
    }
    assert outcomes["apache"]["readonly/right pull _acl"] == "FOUND"
    assert {what: code for what, code in outcomes["apache"].items() if code == 1} == {
        what: 1 for what, code in outcomes["sparkmq"].items() if code == 16
    }
    assert {what: code for what, code in outcomes["apache"].items() if code != 1} == {
        what: code for what, code in outcomes["sparkmq"].items() if code != 16
    }


def test_acl_remarks_match_once_in_the_same_words(acl_runs: dict[str, list[Record]]) -> None:
    apache = [_as_sparkmq_words(r) for r in acl_runs["apache"]]
    ours = acl_runs["sparkmq"]
    denied = "readonly/right pull _aclDenied"
    for records in (apache, ours):
        for r in records:
            if r.get("what") == denied:
                r["message"] = r["message"].replace("No default permission for", "No permission for")
    assert comparable(ours) == comparable(apache)
