"""ACL 1.0 signing (sparkmq.protocol.acl_signing) reproduced byte for byte from frames the real C++ client sent.

The frames were captured on the broker's socket from PyPI ``rocketmq`` 0.4.4 (librocketmq 1.0.1)
with ``set_session_credentials("RocketMQ", "12345678", "LOCAL")``: SEND_MESSAGE with JSON numbers
in its extFields and a body, HEART_BEAT (no typed header, JSON body) and UNREGISTER_CLIENT (an
empty value). Each carries the Signature the client computed; sparkmq must compute the same one.
"""

from __future__ import annotations

import pytest

from sparkmq.protocol import FrameDecoder, RemotingCommand
from sparkmq.protocol.acl_signing import SessionCredentials, content_to_sign, signature

SECRET = "12345678"
CPP_SEND_MESSAGE = bytes.fromhex(
    "000002360000022a7b22636f6465223a31302c226578744669656c6473223a7b224163636573734b6579223a22526f636b65"
    "744d51222c224f6e734368616e6e656c223a224c4f43414c222c225369676e6174757265223a22564839666b49314d6a3467"
    "2b42724173706e582f785070734558413d222c226261746368223a2230222c22626f726e54696d657374616d70223a223137"
    "3935343531353534393936222c2264656661756c74546f706963223a22544257313032222c2264656661756c74546f706963"
    "51756575654e756d73223a342c22666c6167223a302c2270726f647563657247726f7570223a225049445f63617074757265"
    "222c2270726f70657274696573223a224b4559535c75303030316b65792d305c7530303032544147535c7530303031546167"
    "305c7530303032554e49515f4b45595c75303030313031303030303746303030303545384130303030333445463335374130"
    "3130305c7530303032574149545c7530303031747275655c7530303032636f6c6f725c75303030317265645c753030303273"
    "65715c7530303031305c7530303032222c2271756575654964223a302c227265636f6e73756d6554696d6573223a2230222c"
    "22737973466c6167223a302c22746f706963223a2241636c43617074757265222c22756e69744d6f6465223a2230227d2c22"
    "666c6167223a302c226c616e6775616765223a22435050222c226f7061717565223a322c2272656d61726b223a22222c2276"
    "657273696f6e223a36337d0a6d2d626f64792d30"
)
CPP_HEART_BEAT = bytes.fromhex(
    "0000010a000000af7b22636f6465223a33342c226578744669656c6473223a7b224163636573734b6579223a22526f636b65"
    "744d51222c224f6e734368616e6e656c223a224c4f43414c222c225369676e6174757265223a224a4a366f49756761446f48"
    "674951654e796c52424d6f61584f54383d227d2c22666c6167223a302c226c616e6775616765223a22435050222c226f7061"
    "717565223a332c2272656d61726b223a22222c2276657273696f6e223a36337d0a7b22636c69656e744944223a2231323735"
    "372d3132372e302e302e314044454641554c54222c2270726f647563657244617461536574223a5b7b2267726f75704e616d"
    "65223a225049445f63617074757265227d5d7d0a"
)
CPP_UNREGISTER_CLIENT = bytes.fromhex(
    "00000109000001057b22636f6465223a33352c226578744669656c6473223a7b224163636573734b6579223a22526f636b65"
    "744d51222c224f6e734368616e6e656c223a224c4f43414c222c225369676e6174757265223a226872457132454133355048"
    "33327464694e386466465764553438673d222c22636c69656e744944223a2231323735372d3132372e302e302e3140444546"
    "41554c54222c22636f6e73756d657247726f7570223a22222c2270726f647563657247726f7570223a225049445f63617074"
    "757265227d2c22666c6167223a302c226c616e6775616765223a22435050222c226f7061717565223a342c2272656d61726b"
    "223a22222c2276657273696f6e223a36337d0a"
)


def decode(frame: bytes) -> RemotingCommand:
    (command,) = FrameDecoder().feed(frame)
    return command


@pytest.mark.parametrize(("frame", "code"), [(CPP_SEND_MESSAGE, 10), (CPP_HEART_BEAT, 34), (CPP_UNREGISTER_CLIENT, 35)])
def test_signature_of_captured_cpp_frame_is_reproduced(frame: bytes, code: int) -> None:
    request = decode(frame)
    assert request.code == code and request.ext_fields["AccessKey"] == "RocketMQ"
    assert request.ext_fields["OnsChannel"] == "LOCAL"
    content = content_to_sign(request.ext_fields, request.body, request.version)
    assert signature(SECRET, content) == request.ext_fields["Signature"]
    assert signature("another-secret", content) != request.ext_fields["Signature"]


def test_send_frame_signs_json_numbers_as_decimal_text_and_the_body_last() -> None:
    request = decode(CPP_SEND_MESSAGE)
    content = content_to_sign(request.ext_fields, request.body)
    assert b"TBW1024" in content  # defaultTopic then defaultTopicQueueNums (a JSON 4 on the wire)
    assert content.endswith(request.body) and request.body.startswith(b"m-body-0")
    assert b"Signature" not in content and request.ext_fields["Signature"].encode() not in content


def test_heart_beat_content_is_the_two_values_then_the_json_body() -> None:
    request = decode(CPP_HEART_BEAT)
    assert content_to_sign(request.ext_fields, request.body) == b"RocketMQLOCAL" + request.body


def test_session_credentials_sign_what_the_cpp_client_signs() -> None:
    """Our client signer, given the same fields, writes the same Signature as the C++ client."""
    request = decode(CPP_UNREGISTER_CLIENT)
    fields = {k: v for k, v in request.ext_fields.items() if k not in ("AccessKey", "Signature")}
    signed = SessionCredentials("RocketMQ", SECRET).sign(fields, request.body)
    assert signed["Signature"] == request.ext_fields["Signature"]


def test_sorting_is_by_key_and_keys_are_not_signed() -> None:
    assert content_to_sign({"b": "2", "a": "1", "Signature": "x"}, b"!") == b"12!"
    assert content_to_sign({"_UNIQUE_KEY_QUERY": "u", "a": "1"}, version=399) == b"1"  # old Java clients
    assert content_to_sign({"_UNIQUE_KEY_QUERY": "u", "a": "1"}, version=400) == b"u1"  # "_" sorts before "a"


def test_signature_is_base64_hmac_sha1() -> None:
    # RFC 2202 test case 2: HMAC-SHA1("Jefe", "what do ya want for nothing?")
    assert signature("Jefe", b"what do ya want for nothing?") == "7/zfauXrL6LSdBbV8YTfnCWafHk="
