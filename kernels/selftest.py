"""Run every kernel against its reference on this device; the ones that pass may launch.

`python -m kernels.selftest` prints a table; the engine calls `select_kernels()`
at load and gives the model the resulting `KernelSet`. Shapes are small so the
whole check is well under a second once the kernels are compiled. A kernel that
raises (a Metal source that does not compile, say) counts as a failure too.
"""
from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

from kernels.backend import CUDA_ONLY, NAMES, OFF_AT_LOAD, absent_reason, gpu_backend
from kernels.kernel_seeding import SEEDER
from kernels.kernel_set import BACKENDS, KernelSet
from kernels.selftest_checks import CHECKS, TOL
from kernels.selftest_verdict import cached_selftest

OFF_VAR = "TANDEM_KERNELS_OFF"
ON_VAR = "TANDEM_KERNELS_ON"      # OFF_AT_LOAD kernels to launch (kernels/backend.py)


def run_selftest(verbose: bool = True) -> dict:
    """name -> {'backend', 'max_abs_err', 'passed', 'status', 'reason'} (reason: why a
    failing kernel must not launch, else None). Changes nothing: see select_kernels."""
    backend = gpu_backend()
    results = {}
    if backend == "cuda" and SEEDER.state == "on":
        _note_ahead(backend)
    for name, check in CHECKS.items():
        if backend is None:
            results[name] = {"backend": "reference", "max_abs_err": None, "passed": None,
                             "status": f"skipped ({absent_reason()})", "reason": absent_reason()}
            continue
        if backend == "metal" and name in CUDA_ONLY:
            results[name] = {"backend": backend, "max_abs_err": None, "passed": False,
                             "status": "off (CUDA only)", "reason": CUDA_ONLY[name]}
            continue
        try:
            err = check(backend)
            passed = err <= TOL
            reason = f"self-test error {err:.2e} > {TOL:.0e}"
        except Exception as exc:  # a kernel that fails to build must not stop the engine
            err, passed, reason = None, False, f"self-test raised {type(exc).__name__}: {exc}"
        results[name] = {"backend": backend, "max_abs_err": err, "passed": passed,
                         "status": "pass" if passed else "FAIL (disabled)",
                         "reason": None if passed else reason.splitlines()[0][:200]}
    if verbose:
        _print(results)
    return results


def _note_ahead(backend: str) -> None:
    """Every kernel instance the checks meet, noted before the first one runs, so that the
    seeding workers compile them all at once (kernels/kernel_seeding.py) while MLX
    compiles them one check at a time, loading what the workers finished first. Inside
    `SEEDER.dry_run()` the kernels return zeros; the checks' verdicts are discarded."""
    with SEEDER.dry_run():
        for check in CHECKS.values():
            try:
                check(backend)
            except Exception:  # noqa: BLE001 - zeros may trip a check; only the notes count
                pass


def kernel_set_from(results: dict) -> KernelSet:
    """The kernels that passed launch on the backend they were checked on."""
    backend = next((r["backend"] for r in results.values() if r["backend"] in BACKENDS), None)
    if backend is None:
        return KernelSet.plain(absent_reason())
    return KernelSet(backend, tuple((name, r["reason"]) for name, r in results.items()
                                    if not r["passed"]))


def select_kernels(use_kernels: bool = True, verdict_dir: Path | None = None) -> KernelSet:
    """The kernel set for a model loaded now (the engine's setting, then the self-test).
    verdict_dir: where the self-test's verdict is kept for this code, device, driver and
    MLX (kernels/selftest_verdict.py: on CUDA the checks compile for a minute in every
    process); None runs the checks."""
    if not use_kernels:
        return KernelSet.plain("turned off in settings")
    backend = gpu_backend()
    if backend is None:
        return KernelSet.plain(absent_reason())
    if verdict_dir is None:
        return turned_off(kernel_set_from(run_selftest(verbose=False)))
    return turned_off(kernel_set_from(cached_selftest(lambda: run_selftest(verbose=False),
                                                      backend, verdict_dir)))


def turned_off(kernels: KernelSet) -> KernelSet:
    """`kernels` less those named in TANDEM_KERNELS_OFF (comma-separated: one kernel's
    before/after in one build, or a way around one on a user's machine) and the
    OFF_AT_LOAD ones (kernels/backend.py) not named in TANDEM_KERNELS_ON."""
    off, on = _names(OFF_VAR), _names(ON_VAR)
    why = {**{n: w for n, w in OFF_AT_LOAD.items() if n not in on},
           **{n: f"turned off by {OFF_VAR}" for n in off}}
    extra = tuple((n, w) for n, w in why.items() if kernels.launches(n) is not None)
    return replace(kernels, off=kernels.off + extra) if extra else kernels


def _names(var: str) -> list[str]:
    names = [n.strip() for n in os.environ.get(var, "").split(",") if n.strip()]
    unknown = [n for n in names if n not in NAMES]
    if unknown:
        raise ValueError(f"{var}: unknown kernel {unknown[0]!r}; known: {', '.join(NAMES)}")
    return names


def _print(results: dict) -> None:
    print(f"{'kernel':<20} {'backend':<10} {'max abs err':>12}  result")
    for name, r in results.items():
        err = "-" if r["max_abs_err"] is None else f"{r['max_abs_err']:.2e}"
        print(f"{name:<20} {r['backend']:<10} {err:>12}  {r['status']}")


if __name__ == "__main__":
    run_selftest(verbose=True)           # first run compiles the kernels
    t0 = time.perf_counter()
    run_selftest(verbose=False)
    print(f"warm self-test: {1000 * (time.perf_counter() - t0):.1f} ms")
    print(select_kernels().status())
