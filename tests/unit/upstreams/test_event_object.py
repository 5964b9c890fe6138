"""The one guard both stream readers (OpenAI-compatible and Anthropic upstreams) put on each
upstream event: a JSON object passes, anything else is `malformed_stream_event`."""

from __future__ import annotations

import pytest

from levergate.config import MAX_JSON_DEPTH
from levergate.errors import UpstreamUnavailable
from levergate.upstreams.http import event_object, json_object


def test_a_json_object_passes_whatever_its_spacing() -> None:
    assert event_object(b'{ "a" : [1, {"b": null}] }', upstream="u") == {"a": [1, {"b": None}]}


@pytest.mark.parametrize(
    "data",
    [b"", b"not json", b"[1, 2]", b'"text"', b"42", b"null", b'{"a": ', b"\xff\xfe",
     b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1),
     b'{"a": ' * (MAX_JSON_DEPTH + 1) + b"1" + b"}" * (MAX_JSON_DEPTH + 1)],
)  # fmt: skip
def test_anything_else_ends_the_stream_naming_the_upstream(data: bytes) -> None:
    assert json_object(data) is None
    with pytest.raises(UpstreamUnavailable, match="upstream 'edge-1'") as raised:
        event_object(data, upstream="edge-1")
    assert raised.value.code == "malformed_stream_event"
    assert raised.value.upstream == "edge-1"
