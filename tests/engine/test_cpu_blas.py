"""The optimized CPU BLAS (engine/cpu_blas.py): it binds before MLX, computes right,
and a missing or broken library falls back to MLX's own BLAS with the reason.

Each case runs in a fresh interpreter: the choice is made once per process, before
mlx is imported, and this test process imported mlx long ago.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine import cpu_blas

ROOT = Path(__file__).resolve().parents[2]
PROBE = ("import json, engine, mlx.core as mx\n"
         "from engine.cpu_blas import blas_info\n"
         "i = blas_info()\n"
         "print(json.dumps({**i.as_dict(), 'optimized': i.optimized}))\n")
linux_only = pytest.mark.skipif(sys.platform != "linux", reason="Linux CPU wheels only")


def _probe(choice: str | None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(cpu_blas.ENV_VAR, None)
    if choice is not None:
        env[cpu_blas.ENV_VAR] = choice
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                         text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@linux_only
def test_missing_library_falls_back_with_reason():
    info = _probe("/nonexistent/libnothing.so")
    assert info["name"] == cpu_blas.REFERENCE and not info["optimized"]
    assert "cannot load /nonexistent/libnothing.so" in info["reason"]


@linux_only
def test_library_without_cblas_falls_back_with_reason():
    info = _probe("libm.so.6")                  # loads, but has no cblas_sgemm
    assert info["name"] == cpu_blas.REFERENCE
    assert "cblas_sgemm" in info["reason"]


@linux_only
def test_turned_off():
    info = _probe("off")
    assert info == {"name": cpu_blas.REFERENCE, "path": "",
                    "reason": f"{cpu_blas.ENV_VAR}=off", "optimized": False}


@linux_only
def test_default_is_mkl_and_mlx_binds_to_it():
    if not cpu_blas._mkl_path():
        pytest.skip("the mkl package is not installed here")
    info = _probe(None)
    # blas_info() ran the after-load check: cblas_sgemm resolves into MKL's folder and
    # an MLX float32 matmul agrees with numpy's float64 product.
    assert info["optimized"], info
    assert info["name"].startswith("Intel MKL") and info["path"].endswith(cpu_blas.MKL_LIB)


def test_self_check_catches_a_wrong_sgemm():
    def wrong_sgemm(*args):                     # leaves C untouched: all zeros
        return None
    assert "max error" in cpu_blas._sgemm_problem(wrong_sgemm)


def test_compare_tolerance_is_float32_rounding():
    want = np.arange(12, dtype=np.float64).reshape(3, 4)
    assert cpu_blas._compare(want.astype(np.float32), want) == ""
    assert cpu_blas._compare(want + 0.01, want) != ""


def test_cli_line_names_weights_and_blas():
    from engine.terminal.cli import describe_cpu
    line = describe_cpu({"name": cpu_blas.REFERENCE, "path": "", "reason": "TANDEM_CPU_BLAS=off"},
                        {"mode": "quantized", "reason": "CPU backend, quantized by the setting"})
    assert line == ("weights: quantized (CPU backend, quantized by the setting); "
                    f"BLAS: {cpu_blas.REFERENCE} (TANDEM_CPU_BLAS=off)")
