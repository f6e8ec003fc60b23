"""Build an HF `tokenizers.Tokenizer` from a GGUF file's tokenizer metadata.

GGUF stores a byte-level BPE vocabulary as plain lists (tokens, merges, token
types) plus a `tokenizer.ggml.pre` name for the pre-tokenizer regex that
llama.cpp hard-codes. We rebuild the same pipeline HF would load from the
model's tokenizer.json: Split(regex) -> ByteLevel -> BPE, ByteLevel decoder.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

from engine.errors import ModelLoadError

_TOKEN_TYPE_CONTROL = 3        # llama.cpp LLAMA_TOKEN_TYPE_CONTROL: special, e.g. <|im_start|>
_TOKEN_TYPE_USER_DEFINED = 4   # added tokens that are matched verbatim but are not "special"

# Regexes as llama.cpp's llama-vocab.cpp uses them per `tokenizer.ggml.pre`
# (each copied from the model family's tokenizer.json). A list means the
# splits are applied in sequence, as llama.cpp does.
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN35 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
           r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# StarCoder-style vocabularies (SmolLM, Refact, ...) split every digit first.
_DIGITS_THEN_GPT2 = [r"\p{N}", _GPT2]

_PRE_REGEXES: dict[str, str | list[str]] = {
    "llama-bpe": _LLAMA3, "llama3": _LLAMA3, "dbrx": _LLAMA3, "smaug-bpe": _LLAMA3,
    "qwen2": _QWEN2, "deepseek-r1-qwen": _QWEN2, "qwen35": _QWEN35,
    "smollm": _DIGITS_THEN_GPT2, "starcoder": _DIGITS_THEN_GPT2, "refact": _DIGITS_THEN_GPT2,
    "codeshell": _DIGITS_THEN_GPT2, "command-r": _DIGITS_THEN_GPT2,
    "gpt-2": _GPT2, "gpt2": _GPT2, "default": _GPT2,
}


@dataclass(frozen=True)
class GGUFTokenizerInfo:
    """What the GGUF metadata says beyond the vocabulary itself."""
    tokenizer: Tokenizer
    bos_token_id: int | None
    eos_token_id: int | None
    add_bos_token: bool
    chat_template: str | None
    special_tokens: tuple[str, ...]


def _scalar(metadata: dict, key: str, default=None):
    # mx.load returns GGUF scalars as 0-d mx arrays; plain Python values are accepted too.
    value = metadata.get(key)
    if value is None:
        return default
    return value.item() if hasattr(value, "item") else value


def _pre_tokenizer(pre: str | None) -> pre_tokenizers.PreTokenizer:
    regexes = _PRE_REGEXES.get(pre or "default", _GPT2)  # unknown names: GPT-2 is the safest guess
    if isinstance(regexes, str):
        regexes = [regexes]
    splits = [pre_tokenizers.Split(Regex(r), behavior="isolated", invert=False) for r in regexes]
    # The regex already did the splitting; ByteLevel only maps bytes to its printable alphabet.
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    return pre_tokenizers.Sequence([*splits, byte_level])


def _token_types(metadata: dict, n: int) -> np.ndarray:
    types = metadata.get("tokenizer.ggml.token_type")
    if types is None:
        return np.ones(n, dtype=np.int32)  # all "normal"
    return np.asarray(types, dtype=np.int32)


def build_gguf_tokenizer(metadata: dict) -> GGUFTokenizerInfo:
    """Rebuild the tokenizer that the GGUF file describes; raise ModelLoadError if we can't."""
    kind = metadata.get("tokenizer.ggml.model")
    if kind is None:
        raise ModelLoadError("This GGUF file has no tokenizer (tokenizer.ggml.model is missing). "
                             "Use a GGUF that embeds its tokenizer, or the model's HF folder.")
    if kind != "gpt2":
        raise ModelLoadError(
            f"GGUF tokenizer type {kind!r} is not supported yet (only byte-level BPE, 'gpt2'). "
            "Use the model's Hugging Face/MLX folder, which ships tokenizer.json.")
    tokens: list[str] = metadata["tokenizer.ggml.tokens"]
    merges_raw: list[str] = metadata.get("tokenizer.ggml.merges") or []
    vocab = {tok: i for i, tok in enumerate(tokens)}
    # Byte-level symbols never contain a real space (it is 'Ġ'), so one split is exact.
    merges = [tuple(m.split(" ", 1)) for m in merges_raw]
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False,
                                     ignore_merges=False))
    tokenizer.pre_tokenizer = _pre_tokenizer(metadata.get("tokenizer.ggml.pre"))
    tokenizer.decoder = decoders.ByteLevel()

    types = _token_types(metadata, len(tokens))
    control = [tokens[i] for i in np.nonzero(types == _TOKEN_TYPE_CONTROL)[0]]
    user = [tokens[i] for i in np.nonzero(types == _TOKEN_TYPE_USER_DEFINED)[0]]
    # Added tokens are matched in raw text before BPE, so "<|im_start|>" is one id.
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in control])
    if user:
        tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in user])

    bos = _scalar(metadata, "tokenizer.ggml.bos_token_id")
    eos = _scalar(metadata, "tokenizer.ggml.eos_token_id")
    add_bos = bool(_scalar(metadata, "tokenizer.ggml.add_bos_token", False)) and bos is not None
    if add_bos:
        # Same place HF keeps it: the post-processor adds BOS when add_special_tokens=True.
        bos_text = tokens[int(bos)]
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{bos_text} $A", pair=f"{bos_text} $A {bos_text} $B",
            special_tokens=[(bos_text, int(bos))])
    return GGUFTokenizerInfo(
        tokenizer=tokenizer,
        bos_token_id=None if bos is None else int(bos),
        eos_token_id=None if eos is None else int(eos),
        add_bos_token=add_bos,
        chat_template=metadata.get("tokenizer.chat_template"),
        special_tokens=tuple(control),
    )
