"""Open the engine a benchmark measures, and say how long its start took.

A synthetic model (``--model synthetic:NAME``) is built here and served from memory; a
path (or None: the built-in model) loads as in the app. The start is printed in three
parts, so a first start on a cold kernel cache (docs/PERFORMANCE.md, "First start on
CUDA") is measured by any bench: building the weights (synthetic only: not a user's
cost), the load up to "Ready" (self-test, pool, the warm-up's load-time part), and the
warm-up's background part (engine/core/warm_up.py), which a benchmark waits for so that
no timed run shares the engine with it.
"""
from __future__ import annotations

import time

from engine.bench.synthetic import SYNTHETIC_PREFIX, synthetic_in_memory
from engine.config import EngineConfig
from engine.core.engine import Engine
from engine.events import LoadProgress
from engine.kernel_cache import compiled_modules
from kernels.kernel_seeding import SEEDER


def open_engine(model: str | None, config: EngineConfig, quiet: bool = False) -> Engine:
    t0 = time.perf_counter()
    compiling: list[float] = []         # when each load-time warm-up step began
    steps: list[tuple[float, str]] = []  # every progress message, timed
    cached: list[set[str]] = []          # MLX's compiled kernels at each message (CUDA)

    def progress(p: LoadProgress) -> None:
        steps.append((time.perf_counter(), p.message))
        cached.append(compiled_modules())
        if p.message.startswith("Compiling kernels"):
            compiling.append(time.perf_counter())

    if model and model.startswith(SYNTHETIC_PREFIX):
        built = synthetic_in_memory(model.removeprefix(SYNTHETIC_PREFIX))
        t_built = time.perf_counter()
        engine = Engine.from_model(built, config, on_progress=progress)
    else:
        t_built = t0
        engine = Engine.load(model, config, on_progress=progress)
    t_ready = time.perf_counter()
    cached.append(compiled_modules())
    engine.wait_for_warm_up()
    t_warm = time.perf_counter()
    SEEDER.wait_idle()
    if not quiet:
        at_load = t_ready - compiling[0] if compiling else 0.0
        print(f"# engine start: weights built {t_built - t0:.1f} s, load to Ready "
              f"{t_ready - t_built:.1f} s (of which the kernels' self-test "
              f"{self_test_s(steps):.1f} s, {len(compiling)} warm-up steps "
              f"{at_load:.1f} s), background warm-up {t_warm - t_ready:.1f} s more",
              flush=True)
        if compiling:
            print(f"# load-time warm-up steps: {warm_up_steps(steps, t_ready)}", flush=True)
            line = warm_up_compiles(steps, cached)
            if line:
                print(f"# compiled by MLX during the warm-up steps: {line}", flush=True)
        line = kernels_off_line(engine.kernel_status)
        if line:
            print(f"# {line}", flush=True)
        if engine.bundle.prewarm_note:
            print(f"# {engine.bundle.prewarm_note}", flush=True)
        for line in filter(None, engine.bundle.experts_note.split("\n")):
            print(f"# {line}", flush=True)
        if SEEDER.state != "off":
            print(f"# {SEEDER.summary()} (then {time.perf_counter() - t_warm:.1f} s "
                  "waited for its workers)", flush=True)
    return engine


def kernels_off_line(status: dict[str, str]) -> str | None:
    """Where kernels launch, the ones that do not and why (a before/after through
    TANDEM_KERNELS_OFF, a failed self-test); None where none launches (the CPU)."""
    off = {k: v for k, v in status.items() if v.startswith("reference")}
    if not off or len(off) == len(status):
        return None
    return "kernels not launching: " + "; ".join(f"{k} {v}" for k, v in off.items())


def self_test_s(steps: list[tuple[float, str]]) -> float:
    """Seconds from "Checking kernels" to the next progress message: the self-test, or
    reading its kept verdict (kernels/selftest_verdict.py); 0 when it did not report."""
    for (t, message), (t_next, _) in zip(steps, steps[1:]):
        if message == "Checking kernels":
            return t_next - t
    return 0.0


def warm_up_steps(steps: list[tuple[float, str]], t_ready: float) -> str:
    """Each load-time warm-up step's shape and seconds (until the next progress message,
    the last until Ready): where a first start on a cold kernel cache spends its minutes
    (issue 23, item 5)."""
    times = [t for t, _ in steps] + [t_ready]
    return ", ".join(f"{message.removeprefix('Compiling kernels: ')} {times[i + 1] - t:.1f} s"
                     for i, (t, message) in enumerate(steps)
                     if message.startswith("Compiling kernels"))


def warm_up_compiles(steps: list[tuple[float, str]], cached: list[set[str]],
                     most: int = 6) -> str:
    """The kernels MLX compiled into its cache during each load-time warm-up step, by name
    (at most `most` a step, then how many more): `cached[i]` is the cache at message i and
    the last entry at Ready. Which modules a cold start's slow steps compile (issue 23,
    item 5; session 50's 16-token chunk took 10.9 s), where the load's earlier work (the
    self-test, MLX's ops compiled ahead, the kernels' seeding) has finished. '' where
    nothing was compiled (a warm cache, the CPU)."""
    parts = []
    for i, (_, message) in enumerate(steps):
        if not message.startswith("Compiling kernels") or i + 1 >= len(cached):
            continue
        new = sorted(cached[i + 1] - cached[i])
        if new:
            more = f" and {len(new) - most} more" if len(new) > most else ""
            parts.append(f"{message.removeprefix('Compiling kernels: ')}: {len(new)} "
                         f"({', '.join(new[:most])}{more})")
    return "; ".join(parts)
