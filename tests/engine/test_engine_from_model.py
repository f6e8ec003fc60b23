"""Engine.from_model: a model built in memory is served like one read from disk, and
each loaded model keeps its own kernel set (two engines in one process)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from float32_tolerance import assert_close, model_depth
from qwen_fixtures import build_model, random_weights, tiny_config, write_tokenizer
from tiny_models import tiny_llama, tiny_llama_config, write_tiny_llama

import engine.loading.model_bundle as model_bundle
import kernels.moe_route as mr
from engine import Engine, EngineConfig
from engine.loading.model_bundle import InMemoryModel
from engine.tokenization.tokenizer import Tokenizer
from kernels.backend import NAMES
from kernels.kernel_set import KernelSet

CFG = EngineConfig(num_pages=64, page_size=4, prefill_chunk=8, max_context=200)
IDS = [5, 17, 42, 99, 7, 3, 250, 11, 64]


def test_in_memory_model_serves_like_the_same_weights_from_disk(tmp_path):
    folder = write_tiny_llama(tmp_path / "llama", seed=3)
    memory = InMemoryModel(tiny_llama(tiny_llama_config(), seed=3), Tokenizer.from_folder(folder),
                           tiny_llama_config(), "tiny in memory")
    with Engine.load(folder, CFG) as disk, Engine.from_model(memory, CFG) as mem:
        assert mem.model_name == "tiny in memory"
        assert set(mem.kernel_status) == set(disk.kernel_status)
        assert_close(mem.logits(IDS), disk.logits(IDS),
                     model_depth(memory.model, len(IDS)))
        assert mem.generate(["hello world"])[0].text == disk.generate(["hello world"])[0].text


def test_from_model_takes_only_an_in_memory_model(tmp_path):
    with pytest.raises(TypeError):
        Engine.from_model(str(tmp_path))
    with pytest.raises(ValueError):
        InMemoryModel(object(), object(), {}, "")


def _moe_model(tmp_path):
    config = tiny_config("qwen3_5_moe")
    config["text_config"]["num_experts"] = 32          # inside the router kernel's contract
    tmp_path.mkdir()
    write_tokenizer(tmp_path)
    return InMemoryModel(build_model(config, random_weights(config, seed=1)),
                         Tokenizer.from_folder(tmp_path), config, "tiny moe")


def test_each_engine_keeps_its_own_kernel_set(tmp_path, monkeypatch):
    """Engine A's model routes through the (stand-in) router kernel, B's through its plain
    path; loading B does not change A, and running one does not touch the other's set."""
    launches = []

    def router_kernel(logits, k, normalize=True, *, backend):
        launches.append(logits.shape[0])
        return mr.reference(logits, k, normalize)       # the kernel's float32 contract
    monkeypatch.setattr(mr, "kernel", router_kernel)
    only_router = KernelSet("cuda", tuple((n, "test") for n in NAMES if n != "moe_route"))
    monkeypatch.setattr(model_bundle, "select_kernels", lambda use, verdict_dir: only_router)
    # No warm-up (a GPU's default): its forwards would route through A's kernel at load.
    a = Engine.from_model(_moe_model(tmp_path / "a"), replace(CFG, warm_up=False))
    monkeypatch.undo()
    monkeypatch.setattr(mr, "kernel", router_kernel)
    b_model = _moe_model(tmp_path / "b")
    b = Engine.from_model(b_model, EngineConfig(
        num_pages=64, page_size=4, prefill_chunk=8, max_context=200, use_kernels=False,
        warm_up=False))
    with a, b:
        assert a.kernel_status["moe_route"] == "cuda"
        assert b.kernel_status["moe_route"] == "reference (turned off in settings)"
        plain = np.array(b.logits(IDS))
        assert launches == []
        routed = np.array(a.logits(IDS))
        assert launches == [len(IDS)] * 4                   # 4 MoE layers, every token
        assert_close(routed, plain, model_depth(b_model.model, len(IDS)))
        b.logits(IDS)
        assert len(launches) == 4
