"""MLX's quantized-matmul modules compiled in worker processes at load (engine/loading/mlx_prewarm.py).

The speed-up itself is measured on the GPU machine (docs/PERFORMANCE.md, "First start on
CUDA"); here: which ops a model asks for, that each module is compiled by one worker, and
the worker processes' plumbing, run for real on the CPU (a quantized matmul runs there too,
compiling nothing), with the backend forced to "cuda".
"""
from __future__ import annotations

import json

import pytest

from engine.bench.synthetic import synthetic_model
from engine.loading import mlx_prewarm
from engine.loading.mlx_prewarm import (
    MARKER,
    Prewarm,
    embedding_gathers,
    prewarm_ops,
    quantized_shapes,
    row_tiles,
    split_among,
)
from engine.models.base import fuse_projections


@pytest.fixture(scope="module")
def toy_model():
    model, _ = synthetic_model("qwen3.5-toy")
    fuse_projections(model)
    return model


def test_the_shapes_are_the_models_quantized_layers_after_joining(toy_model):
    shapes = quantized_shapes(toy_model)
    assert len(shapes) == len(set(shapes))
    assert {(s.bits, s.group_size) for s in shapes} == {(4, 64), (8, 64)}  # experts, router
    assert all(s.k % s.group_size == 0 and s.dtype == "bfloat16" for s in shapes)
    assert any(s.n == 1024 for s in shapes)    # the output head (the toy's vocabulary)


def test_the_embeddings_lookups_are_gathers_of_its_packed_words_and_its_scales(toy_model):
    assert embedding_gathers(toy_model) == ["uint32", "bfloat16"]
    ops = prewarm_ops(quantized_shapes(toy_model), 512, embedding_gathers(toy_model))
    assert ops[-2:] == [{"op": "gather", "dtype": d, "index": "int32"}
                        for d in ("uint32", "bfloat16")]


def test_the_cache_pools_written_by_index_are_one_scatter_each(toy_model):
    """K/V pages (bfloat16) and the recurrent states (float32; the conv states are
    bfloat16 too): each dtype's scatter module once, after the gathers."""
    assert mlx_prewarm.pool_dtypes(toy_model) == ["bfloat16", "float32"]
    ops = prewarm_ops(quantized_shapes(toy_model), 512, embedding_gathers(toy_model),
                      mlx_prewarm.pool_dtypes(toy_model))
    assert ops[-2:] == [{"op": "scatter", "dtype": d, "index": "int32"}
                        for d in ("bfloat16", "float32")]


def test_a_wide_head_is_asked_for_at_fewer_outputs_of_the_same_alignment():
    from engine.loading.mlx_prewarm import QuantizedShape
    head = QuantizedShape("bfloat16", 4, 64, "affine", 2048, 248320)
    [op] = prewarm_ops([head], 8)
    assert op["n"] < 8192 and op["n"] % 4096 == 248320 % 4096 and op["k"] == 2048
    [small] = prewarm_ops([QuantizedShape("bfloat16", 8, 64, "affine", 2048, 257)], 8)
    assert small["n"] == 257


def test_shapes_mlx_tiles_and_shapes_it_does_not_are_two_modules_in_two_workers():
    from engine.loading.mlx_prewarm import QuantizedShape
    aligned = QuantizedShape("bfloat16", 4, 32, "affine", 576, 3072)    # 3072 = 24 * 128
    plain = QuantizedShape("bfloat16", 4, 32, "affine", 576, 960)       # 960 = 7.5 * 128
    ops = prewarm_ops([aligned, plain], 16)
    assert mlx_prewarm._key(ops[0]) != mlx_prewarm._key(ops[1])
    assert [len(share) for share in split_among(ops, 4)] == [1, 1]


def test_a_tile_is_asked_for_only_where_the_engine_runs_that_many_rows():
    assert row_tiles(7) == []                  # MLX's precompiled matrix-vector kernel
    assert row_tiles(8) == [16]
    assert row_tiles(32) == [16, 32]
    assert row_tiles(512) == [16, 32, 64]


def test_each_module_is_compiled_by_one_worker_and_distinct_ones_by_different_workers(toy_model):
    ops = prewarm_ops(quantized_shapes(toy_model), 512, embedding_gathers(toy_model))
    keys = {mlx_prewarm._key(o) for o in ops}
    shares = split_among(ops, len(keys))
    assert sorted(map(json.dumps, sum(shares, []))) == sorted(map(json.dumps, ops))
    owner = {}
    for i, share in enumerate(shares):
        for op in share:
            assert owner.setdefault(mlx_prewarm._key(op), i) == i
    assert len(shares) == len(keys)            # one key a worker when there are enough
    assert len(split_among(ops, 2)) == 2


def test_workers_run_every_op_once_and_a_second_start_starts_none(toy_model, tmp_path,
                                                                  monkeypatch):
    monkeypatch.setenv("MLX_PTX_CACHE_DIR", str(tmp_path))
    first = Prewarm()
    first.start(toy_model, 32, "cuda")
    assert first.procs
    note = first.wait()
    n = len(prewarm_ops(quantized_shapes(toy_model), 32, embedding_gathers(toy_model),
                        mlx_prewarm.pool_dtypes(toy_model))) + 1
    assert f"{n} of {n} ops" in note and "(0 failed)" in note      # + the sampler's
    assert json.loads((tmp_path / MARKER).read_text())["ops"]
    again = Prewarm()
    again.start(toy_model, 32, "cuda")
    assert not again.procs and again.wait() == ""
    wider = Prewarm()                           # a tile not done yet: workers again
    wider.start(toy_model, 64, "cuda")
    assert wider.procs
    wider.wait()


NONSENSE = {"op": "nonsense", "dtype": "bfloat16", "bits": 4, "group_size": 64,
            "mode": "affine", "rows": 16, "k": 64, "n": 64}


def test_a_failed_op_is_counted_and_leaves_no_marker(toy_model, tmp_path, monkeypatch):
    monkeypatch.setenv("MLX_PTX_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(mlx_prewarm, "prewarm_ops", lambda *_: [NONSENSE])
    monkeypatch.setattr(mlx_prewarm, "sampler_op", lambda model: None)
    p = Prewarm()
    p.start(toy_model, 32, "cuda")
    assert "0 of 1 ops" in p.wait() and "(1 failed)" in p.note
    assert not (tmp_path / MARKER).exists()


def test_the_marker_names_only_the_ops_done_and_a_next_start_runs_the_rest(
        toy_model, tmp_path, monkeypatch):
    monkeypatch.setenv("MLX_PTX_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(mlx_prewarm, "prewarm_ops", lambda *_: [NONSENSE])
    p = Prewarm()
    p.start(toy_model, 32, "cuda")
    assert "1 of 2 ops" in p.wait() and "(1 failed)" in p.note
    assert json.loads((tmp_path / MARKER).read_text())["ops"] == [
        mlx_prewarm.sampler_op(toy_model)]
    again = Prewarm()
    again.start(toy_model, 32, "cuda")
    assert again.ops == [NONSENSE]
    again.wait()


def test_the_sampler_compiles_in_a_worker_of_its_own_at_the_models_vocabulary(
        toy_model, tmp_path, monkeypatch):
    """Its op is the warm-up's sampling graph (engine/core/sampler.app_sampling_draws) on
    logits of the model's vocabulary and dtype; the worker imports the engine from the
    source tree (python -I: no working folder, no PYTHONPATH) and runs it (on this CPU
    without kernels, compiling nothing)."""
    assert mlx_prewarm.sampler_op(toy_model) == {"op": "sampler", "dtype": "bfloat16",
                                                 "vocab": 1024}
    monkeypatch.setenv("MLX_PTX_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(mlx_prewarm, "prewarm_ops", lambda *_: [])
    p = Prewarm()
    p.start(toy_model, 32, "cuda")
    assert len(p.procs) == 1 and p.ops == [mlx_prewarm.sampler_op(toy_model)]
    assert "1 of 1 ops" in p.wait() and "(0 failed)" in p.note


@pytest.mark.parametrize("backend, env", [(None, "1"), ("metal", "1"), ("cuda", "0")])
def test_nothing_starts_off_cuda_or_when_turned_off(toy_model, tmp_path, monkeypatch,
                                                    backend, env):
    monkeypatch.setenv("MLX_PTX_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(mlx_prewarm.ENV_VAR, env)
    p = Prewarm()
    p.start(toy_model, 512, backend)
    assert not p.procs and p.wait() == ""


def test_a_workers_modules_move_into_the_cache_names_first_and_never_over_a_file(tmp_path,
                                                                              monkeypatch):
    from engine.loading import mlx_prewarm_worker as worker
    own, shared = tmp_path / "own", tmp_path / "shared"
    for name in ("qmm_a", "long/name/part"):
        for ext in (".ptx", ".cu", ".txt"):
            (own / (name + ext)).parent.mkdir(parents=True, exist_ok=True)
            (own / (name + ext)).write_text(name + ext)
    (shared / "qmm_a.ptx").parent.mkdir(parents=True)
    (shared / "qmm_a.ptx").write_text("MLX's own")
    moves = []
    real = worker.os.replace
    monkeypatch.setattr(worker.os, "replace",
                        lambda a, b: (moves.append(str(b.relative_to(shared))), real(a, b)))
    assert worker.publish(own, shared) == 1             # qmm_a.ptx was there already
    assert (shared / "qmm_a.ptx").read_text() == "MLX's own"
    assert (shared / "long/name/part.ptx").read_text() == "long/name/part.ptx"
    assert moves.index("long/name/part.txt") < moves.index("long/name/part.ptx")
    assert moves.index("qmm_a.txt") < moves.index("qmm_a.cu")


def test_the_workers_own_folders_are_gone_after_the_wait(toy_model, tmp_path, monkeypatch):
    monkeypatch.setenv("MLX_PTX_CACHE_DIR", str(tmp_path))
    p = Prewarm()
    p.start(toy_model, 16, "cuda")
    assert (tmp_path / mlx_prewarm.WORK_DIR).exists()
    p.wait()
    assert not any((tmp_path / mlx_prewarm.WORK_DIR).iterdir())
