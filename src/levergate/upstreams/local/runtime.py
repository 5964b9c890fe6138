"""`Runtime`: one llama.cpp model and context, through the C API of llama-cpp-python.

The high-level `llama_cpp.Llama` decodes one sequence at a time and keeps logits with its cache
entries; the engine needs several sequences per step, per-sequence KV save/restore (KV only,
~23 KB per token for SmolLM2, against ~130 MB per `LlamaRAMCache` entry) and zero-copy sharing
of a prefix between sequences, so it talks to the C API directly. Everything here is typed and
small; the engine thread is the only caller of the context (`decode`, `logits`, the `seq_*`
and state methods). Tokenizing and templating only read the vocabulary and may run on any
thread.

The KV cache is unified (one pool of `n_ctx` cells for every sequence): a prefix copied from
one sequence to another shares its cells instead of duplicating them, and one request may use
the whole context when it is alone.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from levergate.errors import ConfigError, UpstreamUnavailable
from levergate.upstreams.local.knobs import RuntimeOptions, check_context
from levergate.upstreams.local.pieces import Special

# (token, position, sequence id, wants logits)
Entry = tuple[int, int, int, bool]


def import_llama() -> Any:
    """The `llama_cpp` module, or a ConfigError saying how to install it."""
    try:
        import llama_cpp
    except ImportError:
        raise ConfigError(
            "the local engine needs llama-cpp-python: pip install 'levergate[local]'"
        ) from None
    # Importing llama_cpp installs a log callback that prints every load line to stderr.
    logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)
    return llama_cpp


class Runtime:
    def __init__(self, path: Path, options: RuntimeOptions) -> None:
        self._ll = ll = import_llama()
        ll.llama_backend_init()
        model_params = ll.llama_model_default_params()
        model_params.n_gpu_layers = options.n_gpu_layers
        model = ll.llama_model_load_from_file(str(path).encode(), model_params)
        if not model:
            raise ConfigError(
                f"llama.cpp could not load {path}: a corrupt or truncated GGUF file, or a model "
                "architecture this llama.cpp build does not know"
            )
        self._model = model
        self.vocab = ll.llama_model_get_vocab(model)
        self.n_vocab: int = ll.llama_vocab_n_tokens(self.vocab)
        self.n_ctx_train: int = ll.llama_model_n_ctx_train(model)
        try:
            check_context(options, n_ctx_train=self.n_ctx_train)
        except ConfigError:
            ll.llama_model_free(model)
            raise
        ctx = ll.llama_init_from_model(model, self._context_params(options))
        if not ctx:
            ll.llama_model_free(model)
            raise ConfigError(
                f"{options.where}: llama.cpp could not create a context for {path} with "
                f"n_ctx {options.n_ctx} (out of memory, or a KV cache type it cannot use here?)"
            )
        self._ctx = ctx
        self._memory = ll.llama_get_memory(ctx)
        self.n_ctx: int = ll.llama_n_ctx(ctx)
        self.slots = options.slots
        self.batch_tokens = options.batch_tokens
        self._batch = ll.llama_batch_init(options.batch_tokens, 0, 1)
        self.description = self._description()

    def _context_params(self, options: RuntimeOptions) -> Any:
        params = self._ll.llama_context_default_params()
        params.n_ctx = options.n_ctx
        params.n_batch = options.batch_tokens
        params.n_ubatch = options.ubatch_tokens
        params.n_seq_max = options.slots
        params.n_threads = options.threads
        params.n_threads_batch = options.threads_batch
        params.type_k = params.type_v = options.kv_type
        params.kv_unified = True
        params.no_perf = True
        return params

    def close(self) -> None:
        ll = self._ll
        if self._ctx is not None:
            ll.llama_batch_free(self._batch)
            ll.llama_free(self._ctx)
            ll.llama_model_free(self._model)
            self._ctx = None

    # ---- vocabulary: safe from any thread ---------------------------------------------------

    def tokenize(self, text: str, *, add_special: bool = True) -> list[int]:
        if self._ctx is None:  # stopped: the vocabulary is freed
            raise UpstreamUnavailable("the local engine is stopped", upstream="local")
        data = text.encode()
        parse_special = True  # the template's markers (<|im_start|>...) are special tokens
        room = len(data) + 8
        tokens = (self._ll.llama_token * room)()
        count: int = self._ll.llama_tokenize(
            self.vocab, data, len(data), tokens, room, add_special, parse_special
        )
        if count < 0:  # the buffer was too small: -count is the size needed
            room = -count
            tokens = (self._ll.llama_token * room)()
            count = self._ll.llama_tokenize(
                self.vocab, data, len(data), tokens, room, add_special, parse_special
            )
        return list(tokens[:count])

    def specials(self) -> list[Special] | None:
        """The tokens llama.cpp cuts a text at before tokenizing its fragments one by one, for
        `PieceTokenizer`; None when a prompt must be tokenized whole (not BPE or SentencePiece,
        an EOS or SEP appended at the end, or a special token with no text)."""
        ll = self._ll
        vocab = self.vocab
        kind = ll.llama_vocab_type(vocab)
        if kind not in (ll.LLAMA_VOCAB_TYPE_BPE, ll.LLAMA_VOCAB_TYPE_SPM):
            return None
        if ll.llama_vocab_get_add_eos(vocab) or ll.llama_vocab_get_add_sep(vocab):
            return None
        cut_at = ll.LLAMA_TOKEN_ATTR_CONTROL | ll.LLAMA_TOKEN_ATTR_USER_DEFINED
        cut_at |= ll.LLAMA_TOKEN_ATTR_UNKNOWN
        specials: list[Special] = []
        for token in range(self.n_vocab):
            attr = ll.llama_vocab_get_attr(vocab, token)
            if attr & cut_at:
                try:  # cut points are found in the prompt's str: the text must be UTF-8
                    text = ll.llama_vocab_get_text(vocab, token).decode()
                except UnicodeDecodeError:
                    return None
                if not text:
                    return None
                specials.append(Special(text, lstrip=bool(attr & ll.LLAMA_TOKEN_ATTR_LSTRIP)))
        return specials

    def piece(self, token: int) -> bytes:
        special = False  # end-of-turn markers are not part of the answer's text
        buffer = ctypes.create_string_buffer(64)
        size: int = self._ll.llama_token_to_piece(self.vocab, token, buffer, 64, 0, special)
        if size < 0:
            buffer = ctypes.create_string_buffer(-size)
            size = self._ll.llama_token_to_piece(self.vocab, token, buffer, -size, 0, special)
        return buffer.raw[:size]

    def is_end(self, token: int) -> bool:
        return bool(self._ll.llama_vocab_is_eog(self.vocab, token))

    def chat_template(self) -> str | None:
        template = self._ll.llama_model_chat_template(self._model, None)
        return template.decode() if template else None

    # ---- the context: engine thread only -----------------------------------------------------

    def decode(self, entries: Sequence[Entry]) -> int:
        """Run one step over `entries` (at most `batch_tokens`). 0 is success, 1 means no KV
        cells were free, anything else a failure."""
        batch = self._batch
        batch.n_tokens = len(entries)
        for i, (token, pos, seq, wants_logits) in enumerate(entries):
            batch.token[i] = token
            batch.pos[i] = pos
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = wants_logits
        status: int = self._ll.llama_decode(self._ctx, batch)
        return status

    def logits(self, index: int) -> npt.NDArray[np.float32]:
        """The logits of the `index`-th entry of the last step (a view, valid until the next)."""
        pointer = self._ll.llama_get_logits_ith(self._ctx, index)
        return np.ctypeslib.as_array(pointer, shape=(self.n_vocab,))

    def forget(self, seq: int, start: int = 0) -> None:
        """Drop a sequence's KV cells from position `start` on."""
        self._ll.llama_memory_seq_rm(self._memory, seq, start, -1)

    def share(self, source: int, target: int, length: int) -> None:
        """Give `target` the first `length` positions of `source` (shared cells, no copy)."""
        self._ll.llama_memory_seq_cp(self._memory, source, target, 0, length)

    def clear(self) -> None:
        with_data = True
        self._ll.llama_memory_clear(self._memory, with_data)

    def save(self, seq: int) -> bytearray:
        """The sequence's KV state (no logits), to restore later with `load`. Written straight
        into the returned buffer: a 1.5k-token state is ~35 MB, worth not copying twice."""
        size: int = self._ll.llama_state_seq_get_size(self._ctx, seq)
        state = bytearray(size)
        view = (ctypes.c_uint8 * size).from_buffer(state)
        written: int = self._ll.llama_state_seq_get_data(self._ctx, view, size, seq)
        del view  # release the export so the buffer may be resized
        if written < size:
            del state[written:]
        return state

    def load(self, seq: int, state: bytearray) -> bool:
        view = (ctypes.c_uint8 * len(state)).from_buffer(state)
        return bool(self._ll.llama_state_seq_set_data(self._ctx, view, len(state), seq))

    def _description(self) -> str:
        buffer = ctypes.create_string_buffer(256)
        self._ll.llama_model_desc(self._model, buffer, 256)
        return buffer.value.decode(errors="replace")
