"""mlx-lm on the same weights as ours: the peer every speed claim is measured against.

The arrays are shared, not copied, except the layers our engine joins at load
(engine/models/fused.py): their parts are slices of the joined array, and MLX's CUDA
quantized matmuls refuse a weight that is not one contiguous block ("[gather_qmm] No
implementation for problem shape"), so mlx-lm gets each part as its own contiguous
copy, as loading a checkpoint would give it. The copies cost memory, not speed.
"""
from __future__ import annotations

import importlib
import time

import mlx.core as mx
import mlx.nn as nn

from engine.models.fused import FusedLinear, unfused_parameters

# Our module trees follow mlx-lm's names; only the model_type may differ.
_PEER_TYPES = {"smollm": "llama", "smollm2": "llama"}


def _quantized_modules(model: nn.Module) -> dict[str, dict]:
    """Path -> quantization of each quantized layer, under the names it was loaded with
    (a joined layer stands for each of its parts: engine/models/fused.py)."""
    out = {}
    for path, m in model.named_modules():
        if isinstance(m, FusedLinear) and hasattr(m.joined, "bits"):
            owner = path.rsplit(".", 1)[0] if "." in path else ""
            for name in m.parts.names:
                out[f"{owner}.{name}".lstrip(".")] = {"group_size": m.joined.group_size,
                                                      "bits": m.joined.bits}
        elif hasattr(m, "bits") and hasattr(m, "group_size"):
            out[path] = {"group_size": m.group_size, "bits": m.bits}
    return out


def peer_model(ours: nn.Module, config: dict) -> nn.Module:
    """mlx-lm's implementation of our model's architecture, loaded with our arrays."""
    from engine.loading.loader import model_type_of
    mt = model_type_of(config)
    module = importlib.import_module(f"mlx_lm.models.{_PEER_TYPES.get(mt, mt)}")
    peer = module.Model(module.ModelArgs.from_dict(config))
    quantized = _quantized_modules(ours)
    nn.quantize(peer, class_predicate=lambda p, m: quantized.get(p, False))
    peer.load_weights([(k, mx.contiguous(v)) for k, v in unfused_parameters(ours)],
                      strict=True)
    # On CUDA, a tiny model's layers MLX's quantized matmuls get wrong or read past go
    # around them, as ours do at load (engine/loading/cuda_qmm_guard.py); none at full size.
    from engine.loading import cuda_qmm_guard
    cuda_qmm_guard.apply(peer)
    mx.eval(peer.parameters())
    return peer


class Peer:
    """Decode and prefill timings of mlx-lm (generate_step / BatchGenerator)."""

    def __init__(self, model: nn.Module, sampling: dict | None = None):
        """sampling: {"temperature", "top_p"} for decode runs (default: greedy, mlx-lm's
        argmax), through mlx-lm's own make_sampler."""
        self.model = model
        self.gen = importlib.import_module("mlx_lm.generate")
        self.sampler = None
        if sampling:
            from mlx_lm.sample_utils import make_sampler
            self.sampler = make_sampler(temp=sampling.get("temperature", 0.0),
                                        top_p=sampling.get("top_p", 0.0))

    def prefill_seconds(self, prompt: list[int]) -> float:
        """Time to the first token of one prompt (mlx-lm's default 2048-token steps)."""
        t0 = time.perf_counter()
        step = self.gen.generate_step(mx.array(prompt), self.model, max_tokens=1)
        tok, _ = next(step)
        mx.eval(tok)
        return time.perf_counter() - t0

    def decode_step_seconds(self, prompts: list[list[int]], steps: int) -> float:
        """Median seconds per decode step of a batch of len(prompts) sequences."""
        return self.decode_run(prompts, steps)[0]

    def decode_run(self, prompts: list[list[int]], steps: int) -> tuple[float, dict]:
        """(median seconds per decode step, {"steps", "slowest_s"}) of `steps` steps where
        all rows decoded, without the first (as ours: it holds the prompts' reading)."""
        times = self._decode_times(prompts, steps + 1)[1:]
        return _median(times), {"steps": len(times),
                                "slowest_s": max(times, default=float("nan"))}

    def _decode_times(self, prompts: list[list[int]], steps: int) -> list[float]:
        if len(prompts) == 1:
            return self._decode_single(prompts[0], steps)
        gen = self.gen.BatchGenerator(self.model, max_tokens=steps + 8, sampler=self.sampler,
                                      completion_batch_size=len(prompts),
                                      prefill_batch_size=len(prompts))
        gen.insert(prompts, max_tokens=[steps + 8] * len(prompts))
        times = []
        while len(times) < steps:
            t0 = time.perf_counter()
            out = gen.next_generated() if hasattr(gen, "next_generated") else gen.next()
            if not out:
                break
            if len(out) == len(prompts):      # every row decoded a token: a decode step
                times.append(time.perf_counter() - t0)
        gen.close()
        return times

    def _decode_single(self, prompt: list[int], steps: int) -> float:
        times, t0 = [], None
        for i, (tok, _) in enumerate(self.gen.generate_step(mx.array(prompt), self.model,
                                                             max_tokens=steps + 3,
                                                             sampler=self.sampler)):
            mx.eval(tok)
            now = time.perf_counter()
            if t0 is not None and i >= 3:
                times.append(now - t0)
            t0 = now
        return times


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else float("nan")
