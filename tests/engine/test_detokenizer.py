"""Streaming detokenization never emits half a character and costs O(1) per token."""
import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from engine.tokenization.detokenizer import IncrementalDetokenizer

TEXTS = [
    "Great job 👍🏽! Vive la 🇫🇷 République.",
    "日本語のテキストです。漢字とひらがな。",
    "Ça coûte 12,50 € — naïve façade, Ærø, São Paulo.",
    "mixed: 👨‍👩‍👧 family, 🎉🎉, 中文 and ελληνικά.",
]


@pytest.fixture(scope="module")
def byte_bpe():
    """A tiny byte-level BPE: few merges, so multi-byte chars span several tokens."""
    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["hello world, the quick brown fox"] * 20, trainer)
    return tok


def _stream(tokenizer, ids, **kw):
    detok = IncrementalDetokenizer(tokenizer, **kw)
    pieces = [detok.add(i) for i in ids]
    return pieces, detok.flush()


@pytest.mark.parametrize("text", TEXTS)
def test_stream_has_no_replacement_char_and_joins_to_full_decode(byte_bpe, text):
    ids = byte_bpe.encode(text).ids
    assert len(ids) > len(text) // 2  # really split into byte-ish pieces
    pieces, rest = _stream(byte_bpe, ids)
    assert all("\ufffd" not in p for p in pieces) and rest == ""
    assert "".join(pieces) == byte_bpe.decode(ids) == text


def test_held_bytes_come_out_as_soon_as_the_char_completes(byte_bpe):
    ids = byte_bpe.encode("a👍").ids
    pieces, _ = _stream(byte_bpe, ids)
    assert pieces[0] == "a" and pieces[-1] == "👍" and all(p == "" for p in pieces[1:-1])


def test_flush_returns_a_dangling_partial_char(byte_bpe):
    ids = byte_bpe.encode("ok👍").ids[:-1]  # cut inside the emoji
    pieces, rest = _stream(byte_bpe, ids)
    assert "".join(pieces) == "ok" and rest.startswith("\ufffd")


def test_special_tokens_follow_skip_flag(byte_bpe):
    end = byte_bpe.token_to_id("<|end|>")
    ids = byte_bpe.encode("hi").ids + [end]
    assert "".join(_stream(byte_bpe, ids)[0]) == "hi<|end|>"
    assert "".join(_stream(byte_bpe, ids, skip_special_tokens=True)[0]) == "hi"


def test_leading_space_of_metaspace_tokens_is_kept_after_the_first():
    vocab = {"<unk>": 0, "▁Hello": 1, "▁world": 2, "!": 3, "▁": 4}
    tok = HFTokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    ids = [1, 2, 3, 2]
    pieces, rest = _stream(tok, ids)
    assert pieces == ["Hello", " world", "!", " world"] and rest == ""
    assert "".join(pieces) == tok.decode(ids)


class _CountingDecoder:
    """Records the longest id list the detokenizer ever asked to decode."""

    def __init__(self, inner):
        self.inner, self.longest = inner, 0

    def decode(self, ids, skip_special_tokens=False):
        self.longest = max(self.longest, len(ids))
        return self.inner.decode(ids, skip_special_tokens=skip_special_tokens)


def test_decodes_only_a_short_window(byte_bpe):
    text = " ".join(TEXTS) * 20
    ids = byte_bpe.encode(text).ids
    counting = _CountingDecoder(byte_bpe)
    pieces, rest = _stream(counting, ids)
    assert "".join(pieces) + rest == text
    assert len(ids) > 1000 and counting.longest <= 16
