"""Forwards at fixed shapes: padded decode batches and prompt chunks change no result,
padding rows write nothing a sequence owns and read no extra experts, the warm-up
writes only scratch and reports its progress."""
from __future__ import annotations

import threading

import mlx.core as mx
import numpy as np
import pytest
from float32_tolerance import assert_close, model_depth
from qwen_fixtures import build_model, random_weights, tiny_config
from tiny_models import tiny_llama, write_tiny_llama

from engine.config import EngineConfig
from engine.core import shapes
from engine.core.engine import Engine
from engine.core.runner import Runner
from engine.core.scheduler import PrefillChunk
from engine.core.sequence import Sequence
from engine.core.warm_up import (
    BackgroundWarmUp,
    background_shapes,
    load_shapes,
    warm_up,
    warm_up_shapes,
)
from engine.models.moe import SwitchGLU
from engine.sampling_params import SamplingParams

PROMPTS = [[5, 17, 200, 3, 99, 42, 7], [8, 1, 64, 2, 30], [11, 12, 13, 14, 15, 16, 17, 18, 19]]
PAGE = 4


def test_shape_sets():
    assert shapes.decode_sizes(16) == (1, 2, 4, 8, 16)
    assert shapes.decode_sizes(12) == (1, 2, 4, 8, 12)
    assert [shapes.padded_batch(n, 12) for n in (1, 3, 5, 9, 12)] == [1, 4, 8, 12, 12]
    assert shapes.chunk_lengths(512) == (16, 32, 64, 128, 256, 512)
    assert [shapes.padded_chunk(n, 512) for n in (1, 16, 17, 300, 512)] == [16, 16, 32, 512, 512]
    assert shapes.padded_chunk(700, 512) == 700          # past the limit: as it is
    assert [shapes.table_width(n) for n in (1, 8, 9, 16, 17, 512)] == [8, 8, 16, 16, 32, 512]
    assert shapes.table_widths(8) == (8,) and shapes.table_widths(10) == (8, 16)
    assert shapes.table_widths(512) == (8, 16, 32, 64, 128, 256, 512)
    with pytest.raises(ValueError):
        shapes.padded_batch(0, 8)


def _model(kind: str):
    if kind == "llama":
        return tiny_llama()
    config = tiny_config("qwen3_5_moe")
    model = build_model(config, random_weights(config, seed=3))
    model.fuse_projections()
    return model


def _runner(model, max_num_seqs: int = 8) -> Runner:
    # Padded and unpadded forwards through one path: the plain one. (A GPU compiles decode
    # by default; compiled and plain agree to rounding, not bit for bit, and a spy inside
    # a traced forward sees placeholders: tests/engine/test_compiled_decode.py covers it.)
    config = EngineConfig(max_num_seqs=max_num_seqs, page_size=PAGE, num_pages=64,
                          prefix_cache=False, prefill_chunk=16, fixed_shapes=True,
                          compile_decode=False, chunk_pieces=1)   # whole chunks: mixed forwards
    return Runner(model, config)


def _prefilled(runner: Runner) -> list[Sequence]:
    """Each prompt but its last token in the cache; the last is what decode feeds."""
    seqs = []
    for i, prompt in enumerate(PROMPTS):
        s = Sequence(i, prompt)
        s.pages, s.slot = list(range(1 + 8 * i, 9 + 8 * i)), i
        s.prefill_target = len(prompt) - 1
        seqs.append(s)
    logits = runner.prefill([PrefillChunk(s, 0, len(s.prompt_ids) - 1) for s in seqs])
    mx.eval(logits, runner.cache_arrays())
    for s in seqs:
        s.num_computed = s.prefill_target
    return seqs


def _snapshot(runner: Runner) -> list[np.ndarray]:
    return [np.array(a) for a in runner.cache_arrays()]


def _restore(runner: Runner, arrays: list[np.ndarray]) -> None:
    it = iter(arrays)
    for pair in runner.cache.kv:
        pair[0], pair[1] = mx.array(next(it)), mx.array(next(it))
    for layer in runner.cache.states:
        for i in range(len(layer)):
            layer[i] = mx.array(next(it))


def _outside_scratch(runner: Runner, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """Every cache array less the scratch page 0 (KV) and the scratch slot (states)."""
    n_kv = 2 * len(runner.cache.kv)
    kv = [a[PAGE:] for a in arrays[:n_kv]]
    states = [np.delete(a, runner.scratch_slot, axis=0) for a in arrays[n_kv:]]
    return kv + states


def _unpadded_decode(runner: Runner, seqs: list[Sequence]) -> mx.array:
    """The decode forward without padding (the runner's view of these rows alone)."""
    rows = [(s.pages, s.slot, s.num_tokens - 1, 1) for s in seqs]
    tokens = np.array([[s.all_ids[-1]] for s in seqs], np.int32)
    logits, _ = runner.forward(tokens, runner.build_view(rows, 1))
    return logits[:, -1, :]


def _written_rows(runner: Runner, seqs: list[Sequence]) -> tuple[list[int], list[int]]:
    """What a decode step of seqs writes: each one's K/V row at its new position (in the
    flat [num_pages * PAGE, ...] pools) and its whole state slot."""
    positions = [s.num_tokens - 1 for s in seqs]
    kv = [s.pages[p // PAGE] * PAGE + p % PAGE for s, p in zip(seqs, positions)]
    return kv, [s.slot for s in seqs]


@pytest.mark.parametrize("kind", ["qwen3_5_moe", "llama"])
def test_a_padded_decode_equals_the_unpadded_one_and_writes_nothing_more(kind):
    """The rows' logits and what they write agree up to float32 reordering (4 rows and 3
    rows are different GEMM shapes); every other cache entry but the scratch keeps its
    bits in both runs: the padding row wrote only scratch."""
    model = _model(kind)
    runner = _runner(model)
    seqs = _prefilled(runner)
    depth = model_depth(model, max(s.num_tokens for s in seqs))
    before = _snapshot(runner)
    padded = runner.decode(seqs)                       # 3 rows run as 4
    mx.eval(padded, runner.cache_arrays())
    after_padded = _snapshot(runner)
    _restore(runner, before)
    plain = _unpadded_decode(runner, seqs)
    mx.eval(plain, runner.cache_arrays())
    after_plain = _snapshot(runner)
    assert padded.shape == plain.shape == (3, plain.shape[-1])
    assert_close(padded, plain, depth, "logits")
    kv_rows, slots = _written_rows(runner, seqs)
    n_kv = 2 * len(runner.cache.kv)
    for i, (b, p, u) in enumerate(zip(before, after_padded, after_plain)):
        rows, scratch = (kv_rows, range(PAGE)) if i < n_kv else (slots, [runner.scratch_slot])
        rest = [r for r in range(b.shape[0]) if r not in rows and r not in scratch]
        np.testing.assert_array_equal(p[rest], b[rest])    # bit for bit: not written
        np.testing.assert_array_equal(u[rest], b[rest])
        assert_close(p[rows], u[rows], depth, f"cache array {i}, written rows")


def test_padding_rows_use_the_experts_of_row_0(monkeypatch):
    runner = _runner(_model("qwen3_5_moe"))
    seqs = _prefilled(runner)
    seen = []
    call = SwitchGLU.__call__
    monkeypatch.setattr(SwitchGLU, "__call__",
                        lambda self, x, idx: seen.append(idx) or call(self, x, idx))
    mx.eval(runner.decode(seqs))
    assert seen
    for idx in seen:                                   # [4, k] per MoE layer
        idx = np.array(idx)
        assert idx.shape[0] == 4
        np.testing.assert_array_equal(idx[3], idx[0])


def test_a_padded_prompt_chunk_gives_the_unpadded_logits():
    runner = _runner(_model("qwen3_5_moe"))
    s = Sequence(0, PROMPTS[0])
    s.pages, s.slot, s.prefill_target = [1, 2, 3], 0, len(PROMPTS[0])
    padded = runner.prefill([PrefillChunk(s, 0, len(PROMPTS[0]))])   # 7 tokens run as 16
    mx.eval(padded, runner.cache_arrays())
    full = runner.full_logits(PROMPTS[0])              # a private cache, at 7 tokens
    assert_close(padded[0], full[-1], model_depth(runner.model, len(PROMPTS[0])))


def test_the_warm_up_runs_every_shape_and_writes_only_scratch():
    runner = _runner(_model("qwen3_5_moe"), max_num_seqs=4)
    config = runner.config
    mx.eval(runner.cache_arrays())
    before = _snapshot(runner)
    reports = []
    warm_up(runner, config, reports.append)
    # A step with a prompt chunk has at most 3 decode rows beside it: padded to 4.
    assert warm_up_shapes(config) == [("decode", 1), ("decode", 2), ("decode", 4),
                                      ("prefill", 16), ("padded prefill", 16),
                                      ("mixed", 4, 16), ("padded mixed", 1, 16)]
    fractions = [r.fraction for r in reports]
    assert len(reports) == 7 and fractions == sorted(fractions) and 0.9 <= fractions[0] < 1
    assert "Compiling kernels" in reports[0].message
    for a, b in zip(_outside_scratch(runner, before), _outside_scratch(runner, _snapshot(runner))):
        np.testing.assert_array_equal(a, b)


def test_with_chunks_read_in_pieces_the_warm_up_runs_no_mixed_forward():
    """A chunk read in layer pieces (a CUDA GPU's default) runs beside the decode rows as
    a forward of its own: its shapes are the prefill ones, and no mixed forward runs."""
    config = EngineConfig(max_num_seqs=4, page_size=PAGE, num_pages=64, prefix_cache=False,
                          prefill_chunk=16, fixed_shapes=True, compile_decode=False,
                          chunk_pieces=4)
    assert warm_up_shapes(config) == [("decode", 1), ("decode", 2), ("decode", 4),
                                      ("prefill", 16), ("padded prefill", 16)]


def test_a_compiled_warm_up_runs_every_width_and_writes_only_scratch():
    """Compiled decode: every decode size at every block-table width up to max_context
    (40 tokens: 10 pages of 4, widths 8 and 16), and still nothing outside scratch."""
    config = EngineConfig(max_num_seqs=2, page_size=PAGE, num_pages=64, prefix_cache=False,
                          prefill_chunk=16, max_context=40, fixed_shapes=True,
                          compile_decode=True)
    runner = Runner(_model("qwen3_5_moe"), config)
    rng = np.random.default_rng(0)
    _restore(runner, [rng.standard_normal(a.shape).astype(np.float32)
                      for a in _snapshot(runner)])
    before = _snapshot(runner)
    warm_up(runner, config, lambda report: None)
    assert [s for s in warm_up_shapes(config) if s[0] == "decode"] == [
        ("decode", 1, 8), ("decode", 1, 16), ("decode", 2, 8), ("decode", 2, 16)]
    for a, b in zip(_outside_scratch(runner, before), _outside_scratch(runner, _snapshot(runner))):
        np.testing.assert_array_equal(a, b)


# decode 1, 2; prefill 16, 32, each exactly and padded; 1 row beside a chunk of 16, 32,
# each exactly and padded; then the sampler. In the background: all but decode 1 and the
# prefills, later.
@pytest.mark.parametrize("background,at_load", [(False, 2 + 2 * 2 + 2 * 2 + 1),
                                                (True, 1 + 2 * 2 + 1)])
def test_an_engine_that_warms_up_reports_it_then_serves(tmp_path, background, at_load):
    """The request comes right after "Ready": with the background part still to run, it
    is served between those shapes, and the rest runs after it."""
    folder = write_tiny_llama(tmp_path / "m")
    reports = []
    # fixed shapes as on a GPU; decode not compiled, so the one width and the counts above
    # hold on every machine (a GPU compiles decode by default: 8 more widths, 18 at load)
    config = EngineConfig(max_num_seqs=2, prefill_chunk=32, warm_up=True, kv_budget_mb=8,
                          fixed_shapes=True, compile_decode=False, chunk_pieces=1,
                          warm_up_in_background=background)
    with Engine.load(folder, config, on_progress=reports.append) as engine:
        out = engine.generate([[5, 6, 7]], SamplingParams(max_tokens=3, temperature=0.0))
        assert engine.wait_for_warm_up(timeout=120)
        again = engine.generate([[5, 6, 7]], SamplingParams(max_tokens=3, temperature=0.0))
    messages = [r.message for r in reports]
    assert sum("Compiling kernels" in m for m in messages) == at_load
    assert (reports[-1].fraction, messages[-1]) == (1.0, "Ready")
    assert len(out[0].token_ids) == 3
    assert again[0].token_ids == out[0].token_ids


def test_the_warm_up_at_load_is_what_a_first_conversation_meets():
    """A GPU's default shapes: the one-row decode at the first width and every prompt
    chunk before "Ready"; the rest in the background, the one row's wider tables first
    (a long first reply meets them next), then each larger batch."""
    gpu = dict(max_num_seqs=8, prefill_chunk=512, max_context=8192, fixed_shapes=True,
               compile_decode=True, mixed_forward=True)
    config = EngineConfig(**gpu)
    at_load, later = load_shapes(config), background_shapes(config)
    assert at_load == [("decode", 1, 8)] + [s for s in warm_up_shapes(config)
                                            if "prefill" in s[0]]
    assert len(at_load) == 1 + 12 and len(later) == 52 - 13
    assert sorted(at_load + later) == sorted(warm_up_shapes(config))
    assert later[:6] == [("decode", 1, w) for w in (16, 32, 64, 128, 256, 512)]
    assert later[6] == ("decode", 2, 8) and later[-1][0] == "padded mixed"
    assert load_shapes(EngineConfig(**gpu, warm_up_in_background=False)) == warm_up_shapes(
        EngineConfig(**gpu))


def test_a_failing_background_shape_ends_the_background_warm_up(capsys):
    """Nobody waits on an idle-time shape: one that raises is reported (stderr) and the
    rest are dropped (a step that meets them compiles them), and `done` is set."""
    class Broken:
        compiled = None

        def warm_decode(self, *a):
            raise RuntimeError("no kernel today")

    done = threading.Event()
    background = BackgroundWarmUp([("decode", 2), ("decode", 4)], done)
    assert background.pending and not done.is_set()
    background.run_one(Broken())
    assert not background.pending and done.is_set() and background.ran == []
    assert "no kernel today" in capsys.readouterr().err
    assert BackgroundWarmUp([], threading.Event()).done.is_set()


def test_one_token_chunks_have_no_padded_variant():
    config = EngineConfig(max_num_seqs=1, prefill_chunk=1, compile_decode=False)
    assert warm_up_shapes(config) == [("decode", 1), ("prefill", 1)]


def test_mixed_shapes_are_warmed_only_where_shapes_are_fixed_and_mixed_forwards_run():
    """The largest decode batch beside a prompt (max_num_seqs - 1 rows, padded) times
    chunk lengths, full, and each length once padded; none on the CPU's own shapes, with
    mixed forwards off, or when no decode row can run beside a prompt."""
    config = EngineConfig(max_num_seqs=9, prefill_chunk=32, fixed_shapes=True,
                          mixed_forward=True)
    mixed = [s for s in warm_up_shapes(config) if "mixed" in s[0]]
    assert mixed == [("mixed", 8, n) for n in (16, 32)] + [
        ("padded mixed", 1, 16), ("padded mixed", 1, 32)]
    for off in (dict(fixed_shapes=False), dict(fixed_shapes=True, mixed_forward=False),
                dict(fixed_shapes=True, max_num_seqs=1)):
        config = EngineConfig(**{"prefill_chunk": 32, **off})
        assert not [s for s in warm_up_shapes(config) if "mixed" in s[0]], off


def test_warm_up_must_be_a_bool_or_none():
    with pytest.raises(ValueError, match="warm_up"):
        EngineConfig(warm_up="yes")


def test_fixed_shapes_must_be_a_bool_or_none():
    with pytest.raises(ValueError, match="fixed_shapes"):
        EngineConfig(fixed_shapes=1)


@pytest.mark.skipif(mx.default_device().type != mx.DeviceType.cpu,
                    reason="the CPU's default; a GPU pads by default")
def test_on_the_cpu_nothing_is_padded_by_default():
    """The CPU compiles nothing per shape: 3 decode rows run as 3, a 7-token chunk as 7."""
    config = EngineConfig(max_num_seqs=8, page_size=PAGE, num_pages=64, prefix_cache=False,
                          prefill_chunk=16)
    runner = Runner(_model("llama"), config)
    assert mx.default_device().type == mx.DeviceType.cpu and not runner.fixed_shapes
    shapes_run = []
    forward = runner.forward
    runner.forward = lambda tokens, view, cache=None, compiled=False: (
        shapes_run.append(tuple(tokens.shape)) or forward(tokens, view, cache, compiled))
    seqs = _prefilled(runner)                          # one chunk of 6, 4 and 8 tokens
    mx.eval(runner.decode(seqs), runner.cache_arrays())
    assert shapes_run == [(3, 8), (3, 1)]


def test_a_gpus_default_warm_up_has_no_mixed_shapes_where_no_mixed_forward_runs():
    """Compiled decode, uncompiled chunks (a GPU's defaults): steps run two forwards, so
    the warm-up compiles 40 shapes, not 52 (a shorter first start, issue 23 item 5):
    4 decode sizes x 7 block-table widths (8..512 pages of 16: 8,192 tokens), 6 chunk
    lengths exactly and padded, and 12 mixed ones where mixed forwards run. Compiled
    chunks add their layouts: 6 first chunks and 36 later (lengths 16-512 at each width
    past their tokens: 7 + 7 + 7 + 6 + 5 + 4), each exactly and one token short."""
    gpu = dict(max_num_seqs=8, prefill_chunk=512, fixed_shapes=True, compile_decode=True)
    assert len(warm_up_shapes(EngineConfig(**gpu))) == 4 * 7 + 12 == 40
    assert len(warm_up_shapes(EngineConfig(**gpu, mixed_forward=True))) == 52
    compiled = warm_up_shapes(EngineConfig(**gpu, compile_chunks=True))
    assert len(compiled) == 52 + 2 * (6 + 36) == 136
    assert len([s for s in compiled if s[0] == "compiled prefill"]) == 12   # at load
