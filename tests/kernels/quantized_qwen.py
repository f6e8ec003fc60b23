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
