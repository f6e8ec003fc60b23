"""The stop-string holdback, checked on the STREAMED pieces, not only the final text:
their concatenation is the final text, and no piece ever shows any part of the stop
string that ended the request."""
from __future__ import annotations

import numpy as np
import pytest
from tiny_models import write_tiny_llama

from engine import Engine, EngineConfig, SamplingParams
from engine.core.output_stream import OutputStream
from engine.events import FinishedEvent, TokenEvent

PIECES = ["a", "b", "ab", "</", "s", ">", "</s", "S", "TO", "P", "ST", "OP", "x y", "é", ""]


class PieceDetok:
    """Token id i decodes to PIECES[i] (multi-char and empty pieces included)."""

    def add(self, token_id: int) -> str:
        return PIECES[token_id]

    def flush(self) -> str:
        return ""


def expected_text(ids: list[int], stops: tuple[str, ...], max_tokens: int) -> str:
    """Independent reference: decode token by token; at the first token after which a
    stop string appears, cut at the earliest stop string."""
    raw = ""
    for n, token in enumerate(ids, 1):
        raw += PIECES[token]
        hits = [raw.find(s) for s in stops if s in raw]
        if hits:
            return raw[:min(hits)]
        if n >= max_tokens:
            break
    return raw


def stream_pieces(ids: list[int], stops: tuple[str, ...], max_tokens: int):
    stream = OutputStream(PieceDetok(), frozenset(), SamplingParams(max_tokens=max_tokens,
                                                                     stop=stops), 10_000)
    pieces = []
    for n, token in enumerate(ids, 1):
        pieces.append(stream.add(token, n, n))
        if stream.finish_reason is not None:
            return pieces, stream
    pieces.append(stream.finish())
    return pieces, stream


@pytest.mark.parametrize("stops", [("</s>",), ("STOP",), ("</s>", "STOP"), ("b",),
                                   ("ab", "</s>x"), ("é</",)])
def test_streamed_pieces_never_show_a_stop_string(stops):
    rng = np.random.default_rng(len("".join(stops)))
    for _ in range(400):
        ids = rng.integers(0, len(PIECES), int(rng.integers(1, 30))).tolist()
        max_tokens = int(rng.integers(1, 32))
        pieces, stream = stream_pieces(ids, stops, max_tokens)
        want = expected_text(ids, stops, max_tokens)
        shown = ""
        for piece in pieces:
            shown += piece
            # Nothing shown so far reaches into the stop string that later matched.
            assert want.startswith(shown), (ids, stops, pieces)
        assert shown == want == stream.text, (ids, stops, pieces)


def test_a_stop_string_split_over_tokens_is_held_back_until_it_completes():
    ids = [0, 3, 4, 5]                        # "a", "</", "s", ">"
    pieces, stream = stream_pieces(ids, ("</s>",), 10)
    assert "".join(pieces) == "a" and stream.finish_reason == "stop"
    ids = [0, 3, 4, 1, 1]                     # "a</sbb": no stop after all, all shown
    pieces, stream = stream_pieces(ids, ("</s>",), 10)
    assert "".join(pieces) == "a</sbb" and stream.finish_reason is None


def test_engine_streams_the_same_pieces_without_the_stop_string(tmp_path):
    folder = write_tiny_llama(tmp_path / "llama")
    with Engine.load(folder, EngineConfig(num_pages=64, page_size=4, max_context=200)) as e:
        full = e.generate([[4, 4, 4]], SamplingParams(max_tokens=16))[0]
        assert len(full.text) > 6
        for stop in (full.text[3:6], full.text[4:5]):
            events = list(e.submit([4, 4, 4], SamplingParams(max_tokens=16, stop=(stop,))))
            fin = events[-1]
            assert isinstance(fin, FinishedEvent) and fin.reason == "stop"
            shown = ""
            for ev in events[:-1]:
                assert isinstance(ev, TokenEvent)
                shown += ev.text
                assert full.text[:full.text.find(stop)].startswith(shown)
            assert shown == fin.text == full.text[:full.text.find(stop)]
