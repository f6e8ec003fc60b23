"""Tensor parallelism on MLX's ring backend over localhost, 2 and 4 ranks on the CPU.

The same work runs in one process (the model whole) and on N ranks (each holding a
shard, rank 0 scheduling and broadcasting every step); rank 0's results must match. For
the logits the one process is a fresh one too, like the ranks (rank_main.py alone). Bounded: every launch has a time limit and its processes are killed.

Tolerance: a sharded layer sums N partial dot products where one process sums one,
so float32 results differ by reassociation only. The bound is the suite's one derived
tolerance (tests/float32_tolerance.py: K * eps32 * sqrt(depth) * max|reference|), at
the depth of the deepest model these scenarios run (DEPTH below). Measured: ~9 eps32 of
the logits' scale on the CPU ring; 252 on the H100 (session 49, the MoE model's ragged
prefill, where the ranks' sharded shapes pick other GPU kernels than one process's),
0.39 of the bound. (Until session 49 this file had its own 128 eps32, tighter than
the derivation allows; the H100 crossed it twice.)
"""
from __future__ import annotations

import re
import types

import numpy as np
import pytest
import scenarios
import scenarios_disk
from float32_tolerance import model_depth, tolerance
from qwen_fixtures import tiny_config
from ranks import every_log, run_alone, run_ranks
from tiny_models import tiny_llama_config

from engine.distributed.cluster import BACKSTOP_S, EXIT_GRACE_S, EXIT_LOST
from engine.distributed.heartbeat import SILENCE_S

EPS32 = float(np.finfo(np.float32).eps)
TIME_LIMIT_S = 150.0


def _depth(config: dict, tokens: int) -> int:
    return model_depth(types.SimpleNamespace(**config.get("text_config", config)), tokens)


# The deepest rounding path of the tiny models the scenarios compare (scenarios.tiny_models:
# the Llamas and the Qwens, 640 eps32 of the scale at most), over a context of at most 64
# tokens (the longest prompt is 17 tokens, the longest reply 40); scenarios_disk's wide
# Llama, compared alone, has its own (WIDE_DEPTH).
DEPTH = max(_depth(c, 64) for c in (
    tiny_config("qwen3_5_moe"), tiny_config("qwen3_next"), tiny_config("qwen3_5"),
    tiny_llama_config("qwen2"), tiny_llama_config("llama")))
WIDE_DEPTH = _depth(tiny_llama_config("llama", hidden_size=256, intermediate_size=1024,
                                      num_hidden_layers=4), 64)


def _tolerance(ref: np.ndarray, depth: int = DEPTH) -> float:
    """the suite's float32 tolerance (tests/float32_tolerance.py) at DEPTH"""
    return tolerance(ref, depth)


def _ranks(tmp_path, n: int, scenario: str) -> dict:
    run = run_ranks(n, scenario, tmp_path / f"ranks{n}", TIME_LIMIT_S)
    assert run.codes == [0] * n, "\n".join(run.outputs)[-4000:]
    return dict(np.load(tmp_path / f"ranks{n}" / "result.npz"))


def _same(ref: dict, got: dict) -> None:
    """Every key compared before failing: a failure names each model and pass that is
    off, with its largest difference in float32 epsilons of the logits' scale (session
    47's H100 saw only the first, the MoE model's prefill)."""
    assert set(ref) == set(got)
    off = []
    for k, a in ref.items():
        b = got[k]
        assert a.shape == b.shape, k
        if a.dtype.kind != "f":
            np.testing.assert_array_equal(b, a, err_msg=k)
            continue
        scale = EPS32 * float(np.abs(a).max())
        diff = np.abs(b.astype(np.float64) - a)
        worst = float(diff.max())
        if worst > _tolerance(a):
            at = np.unravel_index(int(diff.argmax()), diff.shape)
            off.append(f"{k}: {worst:.3g} ({worst / scale:.0f} eps) at {tuple(map(int, at))}"
                       f" of {a.shape}, {int((diff > _tolerance(a)).sum())} values beyond")
    assert not off, f"beyond {_tolerance.__doc__}: " + "; ".join(off)


@pytest.mark.parametrize("n", [2, 4])
def test_sharded_logits_equal_one_process(tmp_path, n):
    """Llama (untied, GQA), Llama with a tied head of a vocabulary N does not divide,
    Qwen3.5 hybrid MoE: whole-prompt logits, a ragged prefill and a decode step."""
    run_alone("logits", tmp_path / "alone", TIME_LIMIT_S)
    _same(dict(np.load(tmp_path / "alone" / "result.npz")), _ranks(tmp_path, n, "logits"))


def test_each_rank_loads_its_shard_from_a_folder(tmp_path):
    """An MLX 4-bit Llama folder and an HF bf16 Qwen3.5 MoE folder (experts one by one):
    each rank slices the lazily loaded tensors before evaluating them."""
    scenarios_disk.write_folders(tmp_path / "ranks2" / "models")
    ref = scenarios_disk.disk(None, tmp_path / "ranks2")
    _same(ref, _ranks(tmp_path, 2, "disk"))


@pytest.mark.parametrize("scenario", ["engine_llama", "engine_qwen", "engine_preempt",
                                      "engine_fixed_shapes", "engine_warmed"])
def test_batched_greedy_equals_one_process(tmp_path, scenario):
    """Five prompts batched through the engine (chunked prefill, mixed steps, decode;
    engine_preempt: in a pool too small for all, so sequences are preempted;
    engine_fixed_shapes: the GPU's padded shapes and compiled decode; engine_warmed:
    after every rank ran the load-time warm-up rank 0 broadcast)."""
    ref = getattr(scenarios, scenario)(None, tmp_path / "one")
    _same(ref, _ranks(tmp_path, 2, scenario))
    assert ref.get("preempted", True)


def test_batched_greedy_on_four_ranks(tmp_path):
    ref = scenarios.engine_qwen(None, tmp_path / "one")
    _same(ref, _ranks(tmp_path, 4, "engine_qwen"))


def test_next_turn_reuses_kept_pages_and_state_on_every_rank(tmp_path):
    """Turn 2 and 3 start from turn 1's kept pages and state snapshot: the copies are
    broadcast, or the followers' shards would read stale pages."""
    ref = scenarios.engine_turns(None, tmp_path / "one")
    _same(ref, _ranks(tmp_path, 2, "engine_turns"))


def test_disk_prompt_cache_holds_every_ranks_part(tmp_path):
    """Turn 2, in a new engine, loads turn 1 from rank 0's disk cache (each rank gets
    its heads' part) and goes on as one process does."""
    scenarios_disk.write_float_qwen(tmp_path / "one" / "models")
    scenarios_disk.write_float_qwen(tmp_path / "ranks2" / "models")
    ref = scenarios_disk.engine_disk(None, tmp_path / "one")
    got = _ranks(tmp_path, 2, "engine_disk")
    assert ref["cached"] >= len(scenarios.PROMPT)
    _same(ref, got)


@pytest.mark.parametrize("n", [2, 4])
def test_cancel_mid_stream_frees_pages_then_they_serve_again(tmp_path, n):
    """Rank 0's pool is empty once the rest finish, and a new batch in the freed pages
    (every rank's shard of them) gives one process's tokens. Followers allocate nothing:
    their pages are the ones rank 0's messages name."""
    ref = scenarios.engine_cancel(None, tmp_path / "one")
    got = _ranks(tmp_path, n, "engine_cancel")
    _same(ref, got)
    assert got["cancel_reason"] and got["used_after"] == 0


# Bounds measured from the loss (the doomed rank prints when; the system's monotonic
# clock is every process's): the heartbeat sees a closed socket at once and a silent
# one after SILENCE_S; rank 0 exits EXIT_GRACE_S after the error (the C backstop
# BACKSTOP_S later). Generous for a loaded 2-core machine; start-up not included.
LOSS_TO_ERROR_S = {"exit": 10.0, "stop": SILENCE_S + 10.0}
ERROR_TO_EXIT_S = EXIT_GRACE_S + BACKSTOP_S + 5.0


def _stamp(out: str, prefix: str) -> float:
    """The time.monotonic() a rank printed after prefix. Searched, not matched at a line's
    start: the ring's C++ log writes its "[ring]" and its message apart, and a Python
    line can land between the two."""
    return float(re.search(re.escape(prefix) + r"[^\n]*?at (\d+\.\d+)", out).group(1))


@pytest.mark.parametrize("n, scenario", [(2, "engine_kill"), (2, "engine_hang"),
                                         (4, "engine_kill")])
def test_lost_rank_ends_requests_with_an_error_within_a_bound(tmp_path, n, scenario):
    """The last rank exits (or freezes) mid-reply: the reply ends as an error naming the
    lost machine within LOSS_TO_ERROR_S, new requests are refused, rank 0 ends with
    EXIT_LOST within ERROR_TO_EXIT_S of that, and the other followers end on their own
    once rank 0 has (within run_local's 10 s)."""
    run = run_ranks(n, scenario, tmp_path / scenario, TIME_LIMIT_S)
    out, logs = run.output(0), every_log(run)
    # EXIT_LOST, or 1 from the C backstop (cluster._exit_soon) had os._exit not run.
    assert run.codes[0] in (EXIT_LOST, 1), logs
    assert "first: error after" in out and "stopped answering" in out, logs
    assert "second: refused: EngineClosedError" in out, logs
    assert all(code == EXIT_LOST for code in run.codes[1:-1]), logs
    how = "exit" if scenario == "engine_kill" else "stop"
    lost = _stamp(run.output(n - 1), f"doomed: {how}")
    error = _stamp(out, "first: error")
    assert 0 < error - lost < LOSS_TO_ERROR_S[how], (error - lost, logs)
    assert run.ended_at - error < ERROR_TO_EXIT_S, (run.ended_at - error, logs)
    print(f"{scenario} x{n}: error {error - lost:.2f} s after the loss, rank 0 gone "
          f"{run.ended_at - error:.2f} s after the error")


def test_a_rank_that_never_joins_ends_the_start_up_within_the_join_bound(tmp_path):
    """Rank 1 never starts (a machine where Tandem was not run): rank 0 says which rank
    is missing and exits with EXIT_LOST instead of waiting in the ring's accept()."""
    run = run_ranks(2, "engine_kill", tmp_path / "absent", 90,
                    env={"TEST_ABSENT_RANK": "1", "TANDEM_DIST_JOIN_S": "8"})
    logs = every_log(run)
    assert run.codes[0] == EXIT_LOST, logs
    assert "rank 1 did not join within 8 s" in run.output(0), logs
    assert run.wall_s < 8 + 30, logs


def test_a_rank_that_starts_late_still_joins(tmp_path):
    """Rank 0 starts 18 s after rank 1: alone, MLX's ring gives up connecting after ~16 s
    of tries and the late rank then waits in init for good (measured); the meeting on
    the heartbeat first lets both enter init together."""
    run = run_ranks(2, "engine_llama", tmp_path / "late", TIME_LIMIT_S,
                    env={"TEST_LATE_RANK": "0:18"})
    assert run.codes == [0, 0], every_log(run)
    ref = scenarios.engine_llama(None, tmp_path / "one")
    _same(ref, dict(np.load(tmp_path / "late" / "result.npz")))


def test_generate_with_hosts_runs_under_mlx_launch(tmp_path):
    """`python -m engine generate --hosts hosts.json`: mlx.launch starts both ranks
    (127.0.0.1 hosts run locally) and rank 0 prints what one process prints."""
    import json
    import os
    import subprocess
    import sys

    from ranks import ROOT
    from tiny_models import write_tiny_llama

    from engine.distributed.local import free_ports
    folder = write_tiny_llama(tmp_path / "llama", seed=3)
    local = {"ssh": "127.0.0.1", "ips": ["127.0.0.1"]}
    hosts = tmp_path / "hosts.json"
    hosts.write_text(json.dumps({"backend": "ring", "hosts": [local, local]}))
    command = [sys.executable, "-m", "engine", "generate", "--model", str(folder),
               "--prompt", "hello world", "--prompt", "the fox", "--max-tokens", "8",
               "--temperature", "0"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TANDEM_DIST_PORT": str(free_ports(2))}
    env.pop("MLX_RANK", None)
    alone = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True,
                           timeout=TIME_LIMIT_S)
    both = subprocess.run(command + ["--hosts", str(hosts)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=TIME_LIMIT_S)
    assert alone.returncode == 0 and both.returncode == 0, both.stderr[-3000:]

    def replies(out: str) -> list[str]:      # each completion's text and ending, no timings
        return [ln.split(", ttft")[0] for ln in out.splitlines()]
    assert "mlx._distributed_utils.launch" in both.stderr
    assert replies(both.stdout) == replies(alone.stdout)
    assert both.stdout.count("--- [") == 2


def test_a_rank_reading_its_shard_never_holds_the_whole_model(tmp_path):
    """Reading the folder, each rank's peak memory stays near its shard's bytes (one
    full tensor of slack), well under what one process reading everything peaks at."""
    scenarios_disk.write_wide_llama(tmp_path / "ranks2" / "models")
    ref = scenarios_disk.load_memory(None, tmp_path / "ranks2")
    got = _ranks(tmp_path, 2, "load_memory")
    full_peak = ref["stats"][0, 0]
    largest = 4096 * 256 * 4                    # the embedding, float32
    for peak, shard in got["stats"]:
        assert peak <= shard + largest, (peak, shard)
        assert peak < 0.8 * full_peak, (peak, full_peak)
    np.testing.assert_allclose(got["logits"], ref["logits"], rtol=0,
                               atol=_tolerance(ref["logits"], WIDE_DEPTH))
