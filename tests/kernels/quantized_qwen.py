"""A small 4-bit Qwen3.5 MoE as the loader leaves one: quantized, projections joined, and
on CUDA the layers MLX multiplies wrongly made dense (engine/loading/cuda_qmm_guard.py):
the model the quantized kernels' wiring tests run (test_qmm_rows, test_qmv_normed)."""
import mlx.core as mx
import mlx.nn as nn


def quantized_qwen(hidden: int = 128, dtype=mx.bfloat16, **text_config):
    """Hidden `hidden`, heads of 32, group 64; `text_config` overrides (num_experts...)."""
    from qwen_fixtures import build_model, random_weights, tiny_config

    from engine.loading import cuda_qmm_guard
    from engine.models.qwen3_5 import quantize_predicate
    config = tiny_config("qwen3_5_moe")
    text = config.get("text_config", config)
    text.update(hidden_size=hidden, head_dim=32, linear_key_head_dim=32,
                linear_value_head_dim=32, **text_config)
    weights = {k: v if k.endswith("A_log") else v.astype(dtype)
               for k, v in random_weights(config, seed=5).items()}
    model = build_model(config, weights)
    nn.quantize(model, group_size=64, bits=4, class_predicate=quantize_predicate)
    model.fuse_projections()
    # as the loader does: on CUDA, MLX's product is wrong for the experts' one group along
    # K (64), so those layers go dense there; the plain run would differ from itself
    cuda_qmm_guard.apply(model)
    return model


def one_row_logits(model, kernels) -> list:
    """A prompt of 4 tokens and three decode steps of one row through `kernels`: each
    forward's logits (numpy float32), for the one-row kernels' wiring tests."""
    import numpy as np
    from qwen_fixtures import Rows

    from engine.models.base import use_kernels
    use_kernels(model, kernels)
    rows = Rows(model)
    rows.start(0)
    out = [rows.forward({0: [5, 6, 7, 8]})]
    out += [rows.forward({0: [11 + step]}) for step in range(3)]
    return [np.array(o.astype(mx.float32)) for o in out]


def assert_one_row_kernel_is_rounding_only(backend: str, name: str) -> None:
    """The real launches of kernel `name` inside a float32 4-bit model (float32 scales:
    MLX's own products sum in float32 too), every other kernel on both times: the logits
    of a prompt and three decode steps differ by float32 reordering only
    (tests/float32_tolerance.py)."""
    from float32_tolerance import assert_close, model_depth

    from kernels.kernel_set import KernelSet
    model = quantized_qwen(1024, mx.float32)
    plain = one_row_logits(model, KernelSet(backend, ((name, "test"),)))
    got = one_row_logits(model, KernelSet(backend))
    depth = model_depth(model, 4 + 3)
    for step, (g, p) in enumerate(zip(got, plain)):
        assert_close(g, p, depth, f"forward {step}")


def contract_calls(model, contract, name: str) -> list:
    """one_row_logits through `contract` (a KernelSet subclass standing in for kernel
    `name` with the plain path's own ops, noting each call in `contract.calls`), every
    other kernel off, must give the plain path's logits bit for bit -> the calls noted."""
    from kernels.backend import NAMES
    from kernels.kernel_set import NO_KERNELS
    others = tuple((n, "test") for n in NAMES if n != name)
    contract.calls = []
    plain = one_row_logits(model, NO_KERNELS)
    got = one_row_logits(model, contract("cuda", others))
    for g, p in zip(got, plain):
        assert (g == p).all()
    return contract.calls
