"""A token's own bytes (logprobs' `bytes`): a byte-level BPE token may hold part of a
UTF-8 character, which decoding alone turns into U+FFFD."""
from __future__ import annotations

import json
from functools import lru_cache


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's bytes_to_unicode, inverted: the printable stand-in of each byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    codes, extra = list(printable), 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            codes.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, codes)}


@lru_cache(maxsize=4)
def token_bytes(tokenizer) -> TokenBytes:
    """One per loaded tokenizer (reading its JSON costs ~1 s for a 248k vocabulary)."""
    return TokenBytes(tokenizer)


class TokenBytes:
    def __init__(self, tokenizer):
        self._tok = tokenizer
        decoder = json.loads(tokenizer.backend_json()).get("decoder") or {}
        self._byte_level = decoder.get("type") == "ByteLevel"

    def __call__(self, token_id: int) -> bytes:
        if self._byte_level:
            piece = self._tok.id_to_token(token_id)
            table = _byte_decoder()
            if piece is not None and all(c in table for c in piece):
                return bytes(table[c] for c in piece)
        return self._tok.decode([token_id]).encode("utf-8")
