"""Token logprobs, pure: the score against a float64 log-softmax, the release of entries as their
text is sent (each once, in order, none of a stop string's), and OpenAI's two shapes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from levergate.upstreams.local.logprobs import Scored, Track, score

PIECES = {1: b"Hel", 2: b"lo", 3: b" w\xc3", 4: b"\xa9", 5: b"!", 6: b""}


def piece(token: int) -> bytes:
    return PIECES.get(token, f"<{token}>".encode())


def test_score_is_the_log_softmax_of_the_row_and_the_top_ids_most_likely_first() -> None:
    rng = np.random.default_rng(7)
    row = (rng.standard_normal(49_152) * 4).astype(np.float32)
    reference = row.astype(np.float64) - np.log(np.exp(row.astype(np.float64)).sum())
    token = int(rng.integers(0, len(row)))
    scored = score(row, token, top=5)
    assert scored.logprob == pytest.approx(reference[token], abs=1e-4)
    best = np.argsort(-reference)[:5]
    assert [t for t, _ in scored.top] == [int(i) for i in best]
    assert [lp for _, lp in scored.top] == pytest.approx(list(reference[best]), abs=1e-4)
    assert score(row, token, top=0) == Scored(scored.logprob)
    assert row.dtype == np.float32  # the engine's row is read, never changed


@given(
    st.lists(st.sampled_from(list(PIECES)), max_size=12),
    st.lists(st.integers(0, 40), max_size=6),
    st.integers(0, 40),
)
def test_every_entry_is_released_once_in_order_and_only_if_its_text_was_sent(
    tokens: list[int], progress: list[int], cut: int
) -> None:
    track = Track(kind="chat", piece=piece)
    track.add(tokens, [Scored(-float(i)) for i in range(len(tokens))])
    total = sum(len(piece(t)) for t in tokens)
    final = min(cut, total)
    released = []
    for sent in sorted(min(p, final) for p in progress):
        for entry in track.ready(sent):
            assert entry.end <= sent
            released.append(entry)
    released += track.rest(final)
    assert track.rest(total) == []
    starts = [sum(len(piece(t)) for t in tokens[:i]) for i in range(len(tokens))]
    ends = [start + len(piece(t)) for start, t in zip(starts, tokens, strict=True)]
    wanted = [i for i in range(len(tokens)) if starts[i] < final or ends[i] <= final]
    assert [-e.scored.logprob for e in released] == wanted


def test_chat_and_legacy_shapes() -> None:
    track = Track(kind="chat", piece=piece)
    track.add([1, 2], [Scored(-0.5, ((1, -0.5), (9, -1.5))), Scored(-0.25)])
    shaped = track.shape(track.rest(5))
    assert shaped == {
        "content": [
            {"token": "Hel", "logprob": -0.5, "bytes": [72, 101, 108],
             "top_logprobs": [{"token": "Hel", "logprob": -0.5, "bytes": [72, 101, 108]},
                              {"token": "<9>", "logprob": -1.5, "bytes": list(b"<9>")}]},
            {"token": "lo", "logprob": -0.25, "bytes": [108, 111], "top_logprobs": []},
        ],
        "refusal": None,
    }  # fmt: skip
    legacy = Track(kind="completion", piece=piece)
    legacy.add([1, 3, 4, 5], [Scored(-1.0, ((9, -0.5),)), Scored(-2.0), Scored(-3.0),
                              Scored(-4.0)])  # fmt: skip
    shaped = legacy.shape(legacy.rest(100))
    assert shaped["tokens"] == ["Hel", " w\ufffd", "\ufffd", "!"]
    assert shaped["token_logprobs"] == [-1.0, -2.0, -3.0, -4.0]
    # The chosen token is always in its map, beside the alternatives (OpenAI's "+ 1").
    assert shaped["top_logprobs"][0] == {"<9>": -0.5, "Hel": -1.0}
    # Character offsets: "Hel" + " w" + "é" (split over two tokens) + "!".
    assert shaped["text_offset"] == [0, 3, 5, 6]
