"""Which of a prompt chunk's experts paths is faster here, measured at load.

Two kernels can take a chunk's routed experts from the model's own path (MLX's gathered
matmuls, whose CUDA `gather_qmm` reads an expert again for every pair):
- kernels/moe_experts (a warp a pair, for decode up to its MAX_PAIRS) runs a chunk's too
  *up to* the most pairs at which it was faster by MARGIN at every shorter length measured
  (`reach`): it rereads each pair's expert, so it loses past some length, if anywhere;
- kernels/moe_grouped (each expert read once a launch) runs *from* the fewest pairs at
  which it was faster by MARGIN there and at every longer length measured (`crossing`);
- where both were measured, moe_experts takes the shortest lengths and moe_grouped the
  longest, split where their total time is least (`split`).
Which wins depends on the GPU, the model's widths and MLX's version, so it is measured
where the engine runs: once a model is loaded and its self-test passed the kernel, on one
of its own MoE layers, at the prompt-chunk lengths the prefill budget picks (32-512
tokens), each path called alternately (the first call of each untimed: it compiles),
median of RUNS. Nowhere faster, a kernel keeps its decode range (moe_experts) or stays
off (moe_grouped). A few hundred milliseconds at load on a GPU; never on a CPU. Runs on
the engine thread (it evaluates).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from statistics import median

import mlx.core as mx

# Prompt-chunk lengths a step beside decode reads; below 32 tokens (256 pairs at k = 8)
# kernels/moe_experts takes a chunk's experts before this kernel is asked.
SIZES = (32, 64, 128, 256, 512)
MARGIN = 0.9      # chosen only where it takes at most 90 % of the plain path's time
RUNS = 5


def routed_inputs(n: int, k: int, num_experts: int, dims: int, dtype: mx.Dtype,
                  seed: int = 0) -> tuple[mx.array, mx.array, mx.array]:
    """x [n, dims], idx [n, k] (k distinct experts a token, int32 as the router kernel
    gives them) and scores [n, k] (summing to 1): random routing, as a chunk's tokens
    spread over the experts."""
    kx, ki, ks = mx.random.split(mx.random.key(seed), 3)
    x = mx.random.normal((n, dims), key=kx).astype(dtype)
    idx = mx.argsort(mx.random.uniform(shape=(n, num_experts), key=ki), axis=-1)[:, :k]
    scores = mx.softmax(mx.random.normal((n, k), key=ks), axis=-1)
    return x, idx.astype(mx.int32), scores


def time_both(plain: Callable, grouped: Callable, args: tuple, runs: int = RUNS,
              clock: Callable[[], float] = time.perf_counter) -> tuple[float, float]:
    """Median seconds of each path on `args`, the two alternating."""
    def once(f) -> float:
        start = clock()
        mx.eval(f(*args))
        return clock() - start
    once(plain), once(grouped)              # compiles, and the buffers' first use
    pairs = [(once(plain), once(grouped)) for _ in range(runs)]
    return median(p for p, _ in pairs), median(g for _, g in pairs)


def crossing(times: dict[int, tuple[float, float]], k: int) -> int | None:
    """The fewest pairs (tokens * k) from which grouped took at most MARGIN of the plain
    path's time at every measured length; None when it did not at the longest."""
    least = None
    for n in sorted(times, reverse=True):
        plain, grouped = times[n]
        if grouped > MARGIN * plain:
            break
        least = n * k
    return least


def reach(times: dict[int, tuple[float, float]], k: int) -> int | None:
    """The most pairs (tokens * k) up to which the kernel took at most MARGIN of the plain
    path's time at every measured length; None when it did not at the shortest."""
    most = None
    for n in sorted(times):
        plain, kernel = times[n]
        if kernel > MARGIN * plain:
            break
        most = n * k
    return most


def split(pair_times: dict[int, tuple[float, float]],
          grouped_times: dict[int, tuple[float, float]], k: int) -> tuple[int | None, int | None]:
    """(moe_experts up to, moe_grouped from) in pairs where both were measured: the
    shortest lengths go to moe_experts, the longest to moe_grouped, any between to the
    plain path, each kernel only where it took at most MARGIN of the plain path's time;
    of those assignments the one with the least total share of the plain path's time.
    Measured against the plain path alone, the two ranges overlapped (both faster than
    it), and moe_experts, asked first, kept every length: moe_grouped was measured at
    none. Giving each length to the faster of the two and cutting each range at the
    first length the other won left lengths between the two runs plain where both
    kernels were faster: on session 45's H100, 64-token chunks (512 pairs; the experts
    kernel 0.41 of the plain path's time, the grouped one 0.60) ran plain because at 32
    tokens the grouped kernel's share was 0.633 against the experts kernel's 0.647."""
    def share(times: dict, n: int) -> float:
        plain, kernel = times.get(n, (1.0, float("inf")))
        return kernel / plain
    lengths = sorted(set(pair_times) | set(grouped_times))
    pair = [share(pair_times, n) for n in lengths]
    grouped = [share(grouped_times, n) for n in lengths]
    best, cut = float("inf"), (0, len(lengths))
    for i in range(len(lengths) + 1):            # moe_experts takes lengths[:i]
        if any(s > MARGIN for s in pair[:i]):
            break
        for j in range(i, len(lengths) + 1):     # the plain path [i:j], moe_grouped [j:]
            if any(s > MARGIN for s in grouped[j:]):
                continue
            cost = sum(pair[:i]) + (j - i) + sum(grouped[j:])
            if cost < best:
                best, cut = cost, (i, j)
    i, j = cut
    return (lengths[i - 1] * k if i else None,
            lengths[j] * k if j < len(lengths) else None)


def tune(plain: Callable, grouped: Callable, applies: Callable, inputs: Callable[[int], tuple],
         k: int, sizes=SIZES, timer: Callable = time_both,
         choose: Callable = crossing) -> tuple[int | None, dict]:
    """(choose's pairs: from which the kernel runs (crossing) or up to which (reach), or
    None; {tokens: (plain s, kernel s)}) over the lengths at which the kernel applies."""
    times = {}
    for n in sizes:
        args = inputs(n)
        if applies(*args):
            times[n] = timer(plain, grouped, args)
    return choose(times, k), times


def _columns(times: dict[int, tuple[float, float]], k: int) -> str:
    cols = ", ".join(f"{n * k}: {p * 1e6:.0f}/{g * 1e6:.0f} us" for n, (p, g) in times.items())
    return cols or "no length"


def describe(least: int | None, times: dict[int, tuple[float, float]], k: int) -> str:
    """moe_grouped's line for the logs and the benches' start line."""
    verdict = f"from {least} pairs" if least is not None else "off (not faster here)"
    return f"moe_grouped {verdict}; measured plain/grouped a layer at {_columns(times, k)}"


def describe_reach(most: int | None, decode_pairs: int,
                   times: dict[int, tuple[float, float]], k: int) -> str:
    """moe_experts' line: how far past its decode range (decode_pairs) it runs."""
    verdict = (f"up to {most} pairs" if most is not None and most > decode_pairs
               else f"up to {decode_pairs} pairs (decode; no longer chunk faster here)")
    return f"moe_experts {verdict}; measured plain/kernel a layer at {_columns(times, k)}"
