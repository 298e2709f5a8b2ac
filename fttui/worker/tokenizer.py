"""Tokenizers: a built-in byte-level tokenizer (no hub access) or ``AutoTokenizer``.

Both expose what the data code needs: ``encode(text) -> list[int]`` (no special tokens),
``bos_token_id``, ``eos_token_id``, ``pad_token_id`` (never None) and ``vocab_size``.
"""

from __future__ import annotations

from typing import Any

from fttui.core.profiles.typed import ModelSettings


class ByteTokenizer:
    """ids = UTF-8 byte + 4; specials pad=0, bos=1, eos=2, unk=3; vocab 260."""

    pad_token_id = 0
    bos_token_id = 1
    eos_token_id = 2
    unk_token_id = 3
    offset = 4
    vocab_size = 260
    name = "byte"

    def __len__(self) -> int:
        return self.vocab_size

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids = [b + self.offset for b in text.encode("utf-8")]
        if add_special_tokens:
            ids = [self.bos_token_id] + ids + [self.eos_token_id]
        return ids

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        out = bytearray()
        for i in ids:
            i = int(i)
            if i >= self.offset and i < self.vocab_size:
                out.append(i - self.offset)
            elif not skip_special_tokens:
                out.extend({0: b"<pad>", 1: b"<s>", 2: b"</s>"}.get(i, b"<unk>"))
        return out.decode("utf-8", errors="replace")

    def __repr__(self) -> str:
        return "ByteTokenizer(vocab=260)"


class HFTokenizer:
    """Thin adapter over a transformers tokenizer; pad falls back to eos (then to 0)."""

    def __init__(self, tok: Any) -> None:
        self.tok = tok
        if tok.pad_token_id is None and tok.eos_token_id is not None:
            tok.pad_token = tok.eos_token
        self.name = getattr(tok, "name_or_path", "hf")

    @property
    def pad_token_id(self) -> int:
        pid = self.tok.pad_token_id
        return 0 if pid is None else int(pid)

    @property
    def bos_token_id(self):
        return self.tok.bos_token_id

    @property
    def eos_token_id(self):
        return self.tok.eos_token_id

    @property
    def vocab_size(self) -> int:
        return len(self.tok)

    def __len__(self) -> int:
        return len(self.tok)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=add_special_tokens))

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=skip_special_tokens)


def load_tokenizer(model_section: ModelSettings):
    """``model.tokenizer == "byte"`` -> :class:`ByteTokenizer`; otherwise ``AutoTokenizer`` from the
    tokenizer path (default: ``model.name_or_path``)."""
    spec = model_section.tokenizer
    if spec is None or spec == "":
        spec = "byte" if model_section.init == "random" else model_section.name_or_path
    if spec == "byte":
        return ByteTokenizer()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(spec, trust_remote_code=bool(model_section.trust_remote_code))
    return HFTokenizer(tok)
