"""Streamed pieces always add up to the one-shot decode; a reply never ends in half a character.

Issue 17 item 14 and issue 13 item 4: after a forced emit (stray invalid bytes) a
valid character that follows must not be lost, and a stop/cancel in the middle of
an emoji drops its held-back bytes instead of ending the reply in U+FFFD.
"""
import random

import pytest
from builtin_gguf import builtin_tokenizer
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from engine.core.output_stream import OutputStream
from engine.sampling_params import SamplingParams
from engine.tokenization.detokenizer import IncrementalDetokenizer

SEQUENCES_PER_TOKENIZER = 2000


@pytest.fixture(scope="module")
def smollm():
    return builtin_tokenizer()


@pytest.fixture(scope="module")
def tiny_bpe():
    """A tiny byte-level BPE: few merges, so multi-byte chars span several tokens."""
    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["hello world, the quick brown fox 中文 👍"] * 20, trainer)
    return tok


def _streamed(tokenizer, ids, skip_special_tokens=False):
    detok = IncrementalDetokenizer(tokenizer, skip_special_tokens=skip_special_tokens)
    pieces = [detok.add(i) for i in ids]
    return pieces, detok.flush()


def _high_byte_ids(tokenizer) -> list[int]:
    """Ids of the single-byte tokens 0x80..0xFF: lead and continuation bytes of UTF-8."""
    byte_to_char = dict(zip(range(256), _byte_level_alphabet(), strict=True))
    ids = [tokenizer.token_to_id(byte_to_char[b]) for b in range(0x80, 0x100)]
    return [i for i in ids if i is not None]


def _byte_level_alphabet() -> list[str]:
    # GPT-2's bytes_to_unicode: printable bytes map to themselves, the rest to 256+n.
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]
    shifted, chars = 0, []
    for b in range(256):
        if b in keep:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + shifted))
            shifted += 1
    return chars


def test_reported_case_keeps_the_character_after_stray_bytes(smollm):
    ids = [218] * 7 + [175, 133, 251]    # seven stray 0x80 bytes, then the bytes of 中
    pieces, rest = _streamed(smollm, ids)
    assert smollm.decode(ids) == "\ufffd" * 7 + "中"
    assert "".join(pieces) + rest == "\ufffd" * 7 + "中"


@pytest.mark.parametrize("which", ["smollm", "tiny_bpe"])
@pytest.mark.parametrize("skip_special", [False, True])
def test_random_sequences_stream_to_the_one_shot_decode(request, which, skip_special):
    tokenizer = request.getfixturevalue(which)
    vocab = tokenizer.get_vocab_size(True) if which == "tiny_bpe" else tokenizer.vocab_size
    high = _high_byte_ids(tokenizer)
    assert len(high) > 100        # the byte alphabet is really there
    rng = random.Random(17 + skip_special)
    for _ in range(SEQUENCES_PER_TOKENIZER):
        # Mostly raw high bytes: stray continuations, unfinished and finished characters.
        ids = [rng.choice(high) if rng.random() < 0.6 else rng.randrange(vocab)
               for _ in range(rng.randint(1, 30))]
        pieces, rest = _streamed(tokenizer, ids, skip_special)
        expected = tokenizer.decode(ids, skip_special_tokens=skip_special)
        assert "".join(pieces) + rest == expected, ids


def test_pieces_never_end_inside_a_character(smollm):
    ids = smollm.encode("a👍🏽 中文 🇫🇷 é")
    pieces, rest = _streamed(smollm, ids)
    assert rest == "" and all("\ufffd" not in p for p in pieces)
    assert "".join(pieces) == "a👍🏽 中文 🇫🇷 é"


def _output_stream(tokenizer, max_tokens=100, stop=()):
    return OutputStream(tokenizer.detokenizer(), tokenizer.eos_token_ids,
                        SamplingParams(max_tokens=max_tokens, stop=stop), max_total_tokens=10_000)


def _feed(stream, ids):
    return "".join(stream.add(t, n, n) for n, t in enumerate(ids, start=1))


def test_length_limit_inside_an_emoji_drops_the_unfinished_bytes(smollm):
    ids = smollm.encode("ok 👍")
    assert len(ids) >= 3 and smollm.decode(ids[:-1]).endswith("\ufffd")
    stream = _output_stream(smollm, max_tokens=len(ids) - 1)
    shown = _feed(stream, ids[:-1])
    assert stream.finish_reason == "length"
    assert shown == stream.text == "ok "


def test_eos_and_cancel_inside_an_emoji_drop_the_unfinished_bytes(smollm):
    ids = smollm.encode("hi 🇫🇷")[:-1]          # the second flag letter is cut short
    assert smollm.decode(ids) == "hi 🇫\ufffd"
    eos = next(iter(smollm.eos_token_ids))
    stream = _output_stream(smollm)
    shown = _feed(stream, [*ids, eos])
    assert stream.finish_reason == "stop" and shown == stream.text == "hi 🇫"
    cancelled = _output_stream(smollm)
    shown = _feed(cancelled, ids) + cancelled.finish()
    assert shown == cancelled.text == "hi 🇫"


def test_only_the_unfinished_character_is_dropped(smollm):
    """Stray invalid bytes stay visible as U+FFFD; the final unfinished one is dropped."""
    for ids in ([218] * 3 + [175], [218] * 9, [218] * 6 + [175, 133], [175, 133]):
        stream = _output_stream(smollm)
        shown = _feed(stream, ids) + stream.finish()
        assert shown == stream.text == smollm.decode(ids)[:-1], ids
