"""Every compiled sampling graph the app's and the API's requests meet, the warm-up met first.

On a GPU the draw runs through mx.compile (engine/core/sampler._compiled_draw): one trace
per GraphShape (which branches the batch's settings take) and input shape, and on CUDA a
trace's fused kernels compile (NVRTC) the first time any process meets them. A greedy
request beside the app's streams (an API call at temperature 0, the concurrency bench's
probe) is a graph of its own (GraphShape.greedy_rows), which the warm-up did not sample
until session 49: the likely cause of the ~5 s stall (every stream with it) in the first
process of each of sessions 48-49's H100 leases, in the step after such a prompt's last
chunk (not yet confirmed on a GPU). Counted on the CPU: the graphs each draw asks for, by
GraphShape and by the two forms of its per-row settings (one row, several rows)."""
from __future__ import annotations

import mlx.core as mx
import pytest

from engine.core import sampler
from engine.core.sampler import RowSampler, app_sampling_draws, sample_batch
from engine.sampling_params import SamplingParams
from engine.settings_spec import chat_defaults

VOCAB = 512


@pytest.fixture
def graphs(monkeypatch):
    """The (GraphShape, several rows) of every compiled draw asked for, as on a GPU."""
    seen = set()
    draw = sampler._compiled_draw

    def counted(kernels, shape):
        fn = draw(kernels, shape)
        return lambda logits, keys, arrays: (seen.add((shape, logits.shape[0] > 1)),
                                             fn(logits, keys, arrays))[1]
    monkeypatch.setattr(sampler, "_on_gpu", lambda: True)
    monkeypatch.setattr(sampler, "_compiled_draw", counted)
    return seen


def _app() -> SamplingParams:
    settings = chat_defaults()
    return SamplingParams(temperature=settings["temperature"], top_p=settings["top_p"])


def _draw(rows: list[SamplingParams]) -> None:
    logits = mx.random.normal((len(rows), VOCAB))
    mx.eval(sample_batch(logits, [RowSampler(p) for p in rows], None))


def test_the_warm_up_meets_every_sampling_graph_of_streams_and_a_greedy_request(graphs):
    mx.eval(app_sampling_draws(mx.random.normal((1, VOCAB)), None))
    warm = set(graphs)
    graphs.clear()
    greedy = SamplingParams(temperature=0.0)
    for b in range(1, 8):                      # the app's streams, one to seven
        _draw([_app()] * b)
    _draw([_app()] * 7 + [greedy])             # a temperature-0 request joins them
    _draw([greedy])                            # and alone (an argmax: no compiled draw)
    api = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, min_p=0.0)
    _draw([api])                               # an API client at its defaults, alone
    _draw([api, api])                          # two of them
    _draw([_app()] * 3 + [api])                # beside the app's streams
    assert graphs and warm
    assert graphs <= warm, graphs - warm
    assert any(shape.greedy_rows for shape, _ in graphs)   # the case this guards was met


def test_top_k_values_share_a_graph_up_to_a_power_of_two():
    """Each top_k an API client sends was a sampling graph of its own (traced apart, and
    compiled apart on a GPU); now k in 1..64 makes seven, each with room for its k."""
    from engine.core.sampling_rows import RowSettings
    shapes = {k: RowSettings.of([SamplingParams(temperature=1.0, top_k=k)], VOCAB).shape
              for k in range(1, 65)}
    assert len(set(shapes.values())) == 7
    assert all(k <= s.width < 2 * k for k, s in shapes.items())
    assert RowSettings.of([SamplingParams(temperature=1.0, top_k=300)], VOCAB).shape.width == VOCAB
