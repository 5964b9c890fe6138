"""The model name a client sent (behind `*`) becomes a header value that is safe whatever it
holds: visible ASCII as it is, anything else percent-encoded, an overlong one left out."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from levergate.layers.measure.disclose import MAX_NAME_CHARS, header_value


@given(st.text(max_size=300))
def test_any_name_becomes_a_value_a_header_can_carry(name: str) -> None:
    value = header_value(name)
    if value is None:
        assert len(name) > MAX_NAME_CHARS
        return
    assert value.isascii()
    assert value.isprintable()
    assert value == name or "%" in value


def test_configured_aliases_pass_as_they_are_and_hostile_names_are_encoded() -> None:
    assert header_value("org/model-7b:q4_k_m") == "org/model-7b:q4_k_m"
    assert header_value("gpt\r\nx-evil: 1") == "gpt%0D%0Ax-evil:%201"
    assert header_value("\u0000\u202e\ud7ff\U0001f600") == "%00%E2%80%AE%ED%9F%BF%F0%9F%98%80"
    assert header_value("\ud800") == "%5Cud800"  # a lone surrogate, as JSON can carry it
    assert header_value("m" * (MAX_NAME_CHARS + 1)) is None
