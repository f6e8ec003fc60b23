"""The warm-up's worker processes (engine/core/parallel_warm_up.py): which layers a
shallow copy keeps, how shapes are shared, what is copied into the kernel cache, and a
real run of workers on this CPU (MLX compiles nothing per shape here, so the run checks
the protocol: every shape run once, failures reported and never raised)."""
from __future__ import annotations

from pathlib import Path

import pytest
from tiny_models import write_tiny_llama

from engine.bench.synthetic import QWEN3_5_35B_A3B, SMOLLM2_135M
from engine.config import EngineConfig
from engine.core.engine import Engine
from engine.core.parallel_warm_up import (
    compile_in_workers,
    copy_new_files,
    shallow_config,
    split,
    worker_count,
)
from engine.core.warm_up import warm_up_shapes
from engine.kernel_cache import ENV_VAR


def test_a_shallow_qwen3_5_keeps_one_full_attention_layer_and_its_linear_ones():
    shallow = shallow_config(QWEN3_5_35B_A3B)
    text = shallow["text_config"]
    assert text["num_hidden_layers"] == 4          # 3 linear-attention layers, then full
    assert QWEN3_5_35B_A3B["text_config"]["num_hidden_layers"] == 40   # not changed
    assert {k: v for k, v in text.items() if k != "num_hidden_layers"} == {
        k: v for k, v in QWEN3_5_35B_A3B["text_config"].items() if k != "num_hidden_layers"}


def test_a_shallow_config_keeps_every_layer_type_and_a_dense_mlp_layer():
    config = {"num_hidden_layers": 12, "layer_types": ["linear_attention"] * 5
              + ["full_attention"] + ["linear_attention"] * 6, "mlp_only_layers": [7, 9]}
    shallow = shallow_config(config)
    assert shallow["num_hidden_layers"] == 8
    assert shallow["layer_types"] == config["layer_types"][:8]
    assert shallow["mlp_only_layers"] == [7]


def test_a_llama_keeps_one_layer():
    assert shallow_config(SMOLLM2_135M)["num_hidden_layers"] == 1


def test_shapes_are_shared_round_robin_and_none_is_lost():
    shapes = [("prefill", n) for n in (16, 32, 64, 128, 256)]
    shares = split(shapes, 2)
    assert shares == [shapes[0::2], shapes[1::2]]
    assert sorted(s for share in shares for s in share) == sorted(shapes)


@pytest.mark.parametrize("setting, on_cuda, cpus, shapes, fits, expected", [
    (None, True, 16, 40, 99, 8),      # CUDA: one per two cores, at most 8
    (None, True, 4, 40, 99, 2),
    (None, False, 16, 40, 99, 0),     # not CUDA: none unless asked
    (3, False, 2, 40, 99, 3),
    (None, True, 16, 40, 5, 5),       # no more than fit in memory
    (None, True, 16, 40, 1, 0),       # one worker would only add its start
    (8, True, 16, 3, 99, 3),          # no more than there are shapes
    (0, True, 16, 40, 99, 0),
])
def test_worker_count(setting, on_cuda, cpus, shapes, fits, expected):
    assert worker_count(setting, on_cuda, cpus, shapes, fits) == expected


def test_only_files_the_cache_lacks_are_copied(tmp_path):
    worker, cache = tmp_path / "w", tmp_path / "cache"
    (worker / "sub").mkdir(parents=True)
    cache.mkdir()
    (worker / "a.ptx").write_text("new a")
    (worker / "b.ptx").write_text("new b")
    (worker / "sub" / "c.ptx").write_text("new c")
    (cache / "a.ptx").write_text("old a")
    assert copy_new_files(worker, cache) == 2
    assert (cache / "a.ptx").read_text() == "old a"
    assert (cache / "b.ptx").read_text() == "new b"
    assert (cache / "sub" / "c.ptx").read_text() == "new c"
    assert not list(cache.rglob("*.part"))


def _spec(model_config: dict, config: EngineConfig) -> dict:
    from engine.core.warm_up_worker import engine_config_fields
    return {"model_config": model_config, "engine_config": engine_config_fields(config),
            "num_pages": 16, "kernels": {"backend": None, "off": []}}


CONFIG = EngineConfig(max_num_seqs=2, prefill_chunk=32, max_context=64, kv_budget_mb=8,
                      prefix_cache=False, fixed_shapes=True, warm_up=True)


def test_workers_run_every_shape_once(tmp_path):
    model_config = dict(SMOLLM2_135M, hidden_size=64, intermediate_size=128,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                        vocab_size=320, num_hidden_layers=1)
    shapes = warm_up_shapes(CONFIG)
    seen = []
    report = compile_in_workers(_spec(model_config, CONFIG), shapes, 2, tmp_path / "cache",
                                lambda done, total: seen.append((done, total)))
    assert report.failures == []
    assert report.done == len(shapes) and report.workers == 2
    assert seen == [(i + 1, len(shapes)) for i in range(len(shapes))]


def test_a_worker_that_fails_is_reported_not_raised(tmp_path):
    bad = dict(SMOLLM2_135M, model_type="no-such-family")
    report = compile_in_workers(_spec(bad, CONFIG), warm_up_shapes(CONFIG), 2,
                                tmp_path / "cache")
    assert report.done == 0 and len(report.failures) == 2
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


def test_the_engine_runs_workers_once_for_a_cold_cache(tmp_path, monkeypatch):
    """Asked for (warm_up_workers on this CPU), the load runs the workers, then a marker
    in the cache folder says this model's shapes were compiled: the next start of the
    same model runs none."""
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "kernels"))
    folder = write_tiny_llama(tmp_path / "m", quantized=True)
    config = EngineConfig(**{**CONFIG.__dict__, "warm_up_workers": 2})
    with Engine.load(folder, config) as engine:
        report = engine.warm_up_report
    assert report is not None and report.startswith("2 warm-up workers ran")
    shapes = len(warm_up_shapes(config))
    assert f"ran {shapes}/{shapes} shapes" in report and "failed" not in report
    assert len(list(Path(tmp_path / "kernels").glob("tandem-warm-up-*.done"))) == 1
    with Engine.load(folder, config) as engine:
        assert engine.warm_up_report is None


def test_no_workers_for_a_model_that_is_not_quantized(tmp_path, monkeypatch):
    """random_model quantizes: a float model's workers would compile other kernels."""
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "kernels"))
    folder = write_tiny_llama(tmp_path / "m", quantized=False)
    config = EngineConfig(**{**CONFIG.__dict__, "warm_up_workers": 2})
    with Engine.load(folder, config) as engine:
        assert engine.warm_up_report is None
