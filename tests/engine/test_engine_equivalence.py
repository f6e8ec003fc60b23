"""Batched, chunked and preempted runs give what one sequence alone gives."""
from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from engine_harness import Harness
from float32_tolerance import assert_close, model_depth
from qwen_fixtures import build_model, random_weights, tiny_config
from tiny_models import tiny_llama, tiny_llama_config

RNG = np.random.default_rng(0)
PROMPTS = [RNG.integers(0, 320, n).tolist() for n in (11, 5, 17, 3, 9, 14, 7, 21)]


def _models():
    return {
        "llama": lambda: tiny_llama(),
        "qwen3": lambda: tiny_llama(tiny_llama_config("qwen3")),
        "qwen3_5_moe": lambda: build_model(tiny_config("qwen3_5_moe"),
                                           random_weights(tiny_config("qwen3_5_moe"), 3)),
    }


@pytest.fixture(scope="module", params=list(_models()))
def model(request):
    return _models()[request.param]()


def alone(model, prompt, n, **cfg):
    h = Harness(model, **cfg)
    h.add(0, prompt, n)
    h.run()
    return h


def assert_same(h_alone, h_other, rid_alone=0, rid_other=0):
    seq_a = h_alone.logits[rid_alone]
    seq_b = h_other.logits[rid_other]
    assert len(seq_a) == len(seq_b)
    depth = model_depth(h_alone.loop.runner.model, h_alone.seqs[rid_alone].num_tokens)
    for i, (a, b) in enumerate(zip(seq_a, seq_b)):
        assert mx.argmax(a).item() == mx.argmax(b).item()
        assert_close(b, a, depth, f"step {i}")


def test_sequence_in_a_batch_of_8_with_joins_and_leaves_equals_alone(model):
    target = PROMPTS[0]
    ref = alone(model, target, 12)
    joins = {0: [(0, target, 12)] + [(i, PROMPTS[i], 10) for i in (1, 2, 3)],
             3: [(i, PROMPTS[i], 6) for i in (4, 5)],
             6: [(i, PROMPTS[i], 9) for i in (6, 7)]}
    # whole chunks (a CUDA GPU reads chunks beside decode rows in layer pieces by default:
    # the same replies, test_chunk_pieces.py, but fewer rows together at a time)
    h = Harness(model, max_num_seqs=8, prefill_chunk=64, chunk_pieces=1).run(joins)
    assert max(ev.batch_size for ev in h.steps) == 8
    assert h.seqs[0].output_ids == ref.seqs[0].output_ids
    assert_same(ref, h)


@pytest.mark.parametrize("fixed_shapes", [True, False])
def test_padded_and_unpadded_shapes_give_the_tokens_of_one_sequence_alone(model, fixed_shapes):
    """Padding decode batches (5 rows run as 8) and prompt chunks (11 tokens run as 16),
    as on a GPU, or running them at their own size, as on the CPU: the same as alone."""
    target = PROMPTS[0]
    ref = alone(model, target, 8, fixed_shapes=False, prefill_chunk=512)
    joins = {0: [(0, target, 8)] + [(i, PROMPTS[i], 6) for i in (1, 2, 3, 4)]}
    h = Harness(model, max_num_seqs=8, prefill_chunk=16, fixed_shapes=fixed_shapes,
                chunk_pieces=1).run(joins)                # whole chunks, as above
    assert h.loop.runner.fixed_shapes is fixed_shapes
    assert max(ev.batch_size for ev in h.steps) == 5
    assert h.seqs[0].output_ids == ref.seqs[0].output_ids
    assert_same(ref, h)


@pytest.mark.parametrize("chunk", [1, 4, 7])
def test_chunked_prefill_equals_one_shot(model, chunk):
    ref = alone(model, PROMPTS[7], 6, prefill_chunk=512)
    assert_same(ref, alone(model, PROMPTS[7], 6, prefill_chunk=chunk))


def test_preempted_sequence_gives_the_same_output_and_the_pool_ends_whole(model):
    # 12 usable pages of 4 tokens: three sequences growing to 23+ tokens cannot all fit.
    refs = {i: alone(model, PROMPTS[i], 12) for i in (0, 2, 6)}
    h = Harness(model, num_pages=13, page_size=4, max_num_seqs=4)
    seqs = {i: h.add(i, PROMPTS[i], 12) for i in (0, 2, 6)}
    h.run()
    assert sum(s.num_preemptions for s in seqs.values()) >= 1
    for i, s in seqs.items():
        assert len(s.output_ids) == 12
        assert s.output_ids == refs[i].seqs[0].output_ids
    h.loop.cache.clear()                    # finished turns kept for a next turn
    assert h.loop.cache.pages.num_free == h.loop.cache.pages.num_total


def test_paged_attention_equals_contiguous_attention():
    """Our paged model against mlx-lm's (contiguous KV cache) on the same weights."""
    mlx_lm_llama = pytest.importorskip("mlx_lm.models.llama")
    from mlx.utils import tree_flatten
    from mlx_lm.models.cache import make_prompt_cache
    cfg = tiny_llama_config()
    ours = tiny_llama(cfg)
    ref = mlx_lm_llama.Model(mlx_lm_llama.ModelArgs(**cfg))
    ref.load_weights(list(tree_flatten(ours.parameters())))
    prompt = PROMPTS[2]
    h = alone(ours, prompt, 16, page_size=4)
    tokens = [int(mx.argmax(x).item()) for x in h.logits[0]]
    cache = make_prompt_cache(ref)
    out = ref(mx.array([prompt]), cache=cache)[0, -1]
    depth = model_depth(ours, len(prompt) + len(tokens))
    for i, tok in enumerate(tokens):
        assert_close(h.logits[0][i], out, depth, f"step {i}")
        out = ref(mx.array([[tok]]), cache=cache)[0, -1]


def test_prompts_arriving_together_are_read_in_one_forward(model):
    refs = {i: alone(model, PROMPTS[i], 5) for i in (1, 3, 4)}
    h = Harness(model, max_num_seqs=8, prefill_chunk=64)
    seqs = {i: h.add(i, PROMPTS[i], 5) for i in (1, 3, 4)}
    h.run()
    assert max(len(ev.prefill_request_ids) for ev in h.steps) == 3
    for i, s in seqs.items():
        assert s.output_ids == refs[i].seqs[0].output_ids
        assert_same(refs[i], h, 0, i)
