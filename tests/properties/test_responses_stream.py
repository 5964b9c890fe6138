"""Any chat stream (text, refusals and interleaved tool calls in any order, split anywhere) is
translated into a well-formed Responses event stream, and a whole response replays as one."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from levergate.protocol.responses.answer import events_of
from levergate.protocol.responses.stream import EventWriter

texts = st.text(min_size=1, max_size=8)
deltas = st.one_of(
    st.builds(lambda t: {"content": t}, texts),
    st.builds(lambda t: {"refusal": t}, texts),
    st.builds(
        lambda i, t: {"tool_calls": [{"index": i, "id": f"call_{i}", "type": "function",
                                      "function": {"name": f"f{i}", "arguments": t}}]},
        st.integers(min_value=0, max_value=2), texts,
    ),
    st.just({}),
)  # fmt: skip
finishes = st.sampled_from(["stop", "length", "tool_calls", "content_filter", None])


def chunks_of(steps: list[dict[str, Any]], finish: str | None) -> list[dict[str, Any]]:
    head = {"id": "c", "object": "chat.completion.chunk", "model": "m"}
    out = [{**head, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in steps]
    out.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    return out


def check_well_formed(events: list[dict[str, Any]]) -> None:
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] in ("response.completed", "response.incomplete")
    added: dict[int, dict[str, Any]] = {}
    done: dict[int, dict[str, Any]] = {}
    text: dict[tuple[int, int], str] = {}
    arguments: dict[int, str] = {}
    for event in events[1:-1]:
        kind = event["type"]
        if kind == "response.output_item.added":
            assert event["output_index"] not in added
            added[event["output_index"]] = event["item"]
        elif kind == "response.output_item.done":
            index = event["output_index"]
            assert index in added
            assert index not in done
            assert event["item"]["id"] == added[index]["id"]
            done[index] = event["item"]
        elif kind.endswith(".delta"):
            index = event["output_index"]
            assert index in added
            assert index not in done
            if kind == "response.function_call_arguments.delta":
                arguments[index] = arguments.get(index, "") + event["delta"]
            else:
                place = (index, event["content_index"])
                text[place] = text.get(place, "") + event["delta"]
        elif kind in ("response.output_text.done", "response.refusal.done"):
            field = "text" if kind == "response.output_text.done" else "refusal"
            assert text.get((event["output_index"], event["content_index"]), "") == event[field]
        elif kind == "response.function_call_arguments.done":
            assert arguments.get(event["output_index"], "") == event["arguments"]
    assert sorted(added) == sorted(done) == list(range(len(added)))
    final = events[-1]["response"]["output"]
    assert final == [done[i] for i in sorted(done)]


@given(st.lists(deltas, max_size=30), finishes)
def test_any_chat_stream_becomes_a_well_formed_event_stream(
    steps: list[dict[str, Any]], finish: str | None
) -> None:
    writer = EventWriter({"model": "m", "input": "x"}, response_id="resp_1", model="m")
    events = writer.open()
    for chunk in chunks_of(steps, finish):
        events += writer.feed(chunk)
    events += writer.close()
    check_well_formed(events)
    pieces = "".join(d.get("content", "") for d in steps)
    said = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert said == pieces


@given(st.lists(deltas, max_size=20), finishes, st.integers(min_value=1, max_value=5))
def test_a_whole_response_replays_as_a_well_formed_stream(
    steps: list[dict[str, Any]], finish: str | None, size: int
) -> None:
    writer = EventWriter({"model": "m", "input": "x"}, response_id="resp_1", model="m")
    writer.open()
    for chunk in chunks_of(steps, finish):
        writer.feed(chunk)
    response = writer.close()[-1]["response"]

    def split(text: str) -> list[str]:
        return [text[i : i + size] for i in range(0, len(text), size)]

    events = list(events_of(response, split=split))
    check_well_formed(events)
    assert events[-1]["response"] == response
