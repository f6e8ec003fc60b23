"""kernels/kernel_seeding.py, its worker and the headers it compiles with, without a GPU:
the seeder's states (nothing written until the canary proves MLX reads what is written),
what the worker writes and in which order, and that every kernel goes through the one
wrapper that notes it. On CUDA, the canary on the real MLX."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import pytest

import kernels.nvrtc_worker as worker
from kernels import gpu_backend
from kernels.kernel_build import _SeededCudaKernel
from kernels.kernel_seeding import SEEDER, Seeder
from kernels.mlx_device_headers import PREFIX, embedded_headers, needed

UTILS = (b"// Copyright 2025\n#pragma once\n#include \"mlx/backend/cuda/device/complex.cuh\"\n"
         b"#include \"mlx/backend/cuda/device/config.h\"\n"
         b"using Shape = cuda::std::array<int32_t, MAX_NDIM>;\n"
         b"using Strides = cuda::std::array<int64_t, MAX_NDIM>;\n")
COMPLEX = (b"// Copyright 2025\n#pragma once\ntemplate <typename T>\n"
           b"using complex_t = cuda::std::complex<T>;\nusing complex64_t = complex_t<float>;\n")
CONFIG = b"// Copyright 2025\n#pragma once\n#define MAX_NDIM 10\n// padding to sixty-four bytes\n"


def _library(*texts: bytes) -> bytes:
    return b"\x7fELF junk\x00" + b"\x00\x00".join(texts) + b"\x00tail"


def test_headers_are_read_from_the_library_by_lines_only_they_have():
    found = embedded_headers(_library(UTILS, COMPLEX, CONFIG, UTILS))   # a copy: the same
    assert found == {PREFIX + "utils.cuh": UTILS, PREFIX + "complex.cuh": COMPLEX,
                     PREFIX + "config.h": CONFIG}
    source = '#include "mlx/backend/cuda/device/utils.cuh"\n'
    assert set(needed(source, found)) == set(found)
    assert needed("no mlx header", found) == {}


def test_a_header_found_twice_different_or_not_at_all_is_left_out():
    other = UTILS.replace(b"#pragma once", b"#pragma once\n// another version")
    found = embedded_headers(_library(UTILS, other, CONFIG))
    assert PREFIX + "utils.cuh" not in found and PREFIX + "complex.cuh" not in found
    assert needed('#include "mlx/backend/cuda/device/utils.cuh"', found) is None


def test_an_installed_config_h_is_read_from_the_include_folder(tmp_path):
    on_disk = tmp_path / PREFIX / "config.h"
    on_disk.parent.mkdir(parents=True)
    on_disk.write_bytes(b"#define MAX_NDIM 10 // installed")
    found = embedded_headers(_library(UTILS, COMPLEX), tmp_path)
    assert found[PREFIX + "config.h"] == on_disk.read_bytes()


def test_the_worker_writes_the_names_before_the_code_each_file_whole(tmp_path, monkeypatch):
    order = []
    real = worker.os.replace
    monkeypatch.setattr(worker.os, "replace", lambda a, b: (order.append(Path(b).suffix),
                                                             real(a, b)))
    out = tmp_path / "sub" / "custom_kernel_k_1f.ptx"
    worker.write_module(out, b"\x7fELF code", "mlx::core::cu::custom_kernel_k", "_ZN3k", "src")
    assert order == [".cu", ".txt", ".ptx"]
    assert out.read_bytes() == b"\x7fELF code"
    assert out.with_suffix(".txt").read_text() == "mlx::core::cu::custom_kernel_k\t_ZN3k\n"
    assert sorted(p.name for p in out.parent.iterdir()) == [
        "custom_kernel_k_1f.cu", "custom_kernel_k_1f.ptx", "custom_kernel_k_1f.txt"]


def test_a_worker_that_cannot_compile_says_so_and_writes_nothing(tmp_path):
    job = {"nvrtc": str(tmp_path / "no-libnvrtc.so"), "source": "", "module": "m",
           "kernel": "k", "headers": {}, "options": [], "cubin": True,
           "out": str(tmp_path / "m.ptx")}
    run = subprocess.run([sys.executable, "-I", worker.__file__], input=json.dumps(job),
                         capture_output=True, text=True)
    result = json.loads(run.stdout)
    assert run.returncode == 1 and not result["ok"] and "OSError" in result["error"]
    assert list(tmp_path.iterdir()) == []


class _Toolchain:
    nvrtc, options, cubin = "libnvrtc.so", [], True
    headers = {PREFIX + "utils.cuh": UTILS, PREFIX + "complex.cuh": COMPLEX,
               PREFIX + "config.h": CONFIG}


def _seeder(tmp_path, canary: float, monkeypatch) -> tuple[Seeder, list]:
    """A seeder past start() whose compiles are recorded, not run."""
    compiled = []
    s = Seeder()
    s.tools, s.cache, s.state, s._canary_ok = _Toolchain(), tmp_path, "checking", True

    class _Done:
        def join(self, timeout=None):
            pass
    s._canary = _Done()
    monkeypatch.setattr(s, "_canary_value", lambda: canary)
    monkeypatch.setattr(s, "_compile", lambda src, module, kname: compiled.append(module)
                        or "compiled")
    return s, compiled


INGREDIENTS = ("k", "", "out[0] = 1;", [("x", "float32", 1)], [("out", "float32")], ())


def test_nothing_is_compiled_until_the_canary_comes_back_from_mlx(tmp_path, monkeypatch):
    s, compiled = _seeder(tmp_path, 42.0, monkeypatch)
    s.note("a", INGREDIENTS)
    s.note("a", INGREDIENTS)                   # one instance, noted once
    assert compiled == [] and len(s._pending) == 1
    assert s.check() and s.state == "on"
    s.wait_idle(timeout=30)
    assert len(compiled) == 1 and compiled[0].startswith("custom_kernel_k_")
    assert s.counts["compiled"] == 1
    s.note("b", INGREDIENTS[:5] + ((("N", 4),),))
    s.wait_idle(timeout=30)
    assert compiled[1].startswith("custom_kernel_k_4_")


def test_a_module_already_in_the_cache_is_not_compiled_again(tmp_path, monkeypatch):
    s, compiled = _seeder(tmp_path, 42.0, monkeypatch)
    assert s.check()
    s._seed(INGREDIENTS)
    (tmp_path / (compiled[0] + ".ptx")).write_bytes(b"code")
    s._seed(INGREDIENTS)
    assert len(compiled) == 1 and s.counts["found"] == 1


def test_when_mlx_compiles_the_canary_itself_nothing_is_written(tmp_path, monkeypatch):
    s, compiled = _seeder(tmp_path, 6.0, monkeypatch)     # MLX's own compile: 1 + 3 + 1 + 1
    s.note("a", INGREDIENTS)
    assert not s.check() and s.state == "failed"
    s.note("b", INGREDIENTS)
    assert compiled == [] and s._pending == [] and s._jobs.empty()


def test_the_canary_is_one_sources_code_under_the_other_sources_name(tmp_path, monkeypatch):
    from kernels.cuda_jit_names import kernel_name, module_name, wrap_source
    from kernels.kernel_seeding import _CANARY, _CANARY_TEMPLATE
    s, compiled = _seeder(tmp_path, 42.0, monkeypatch)
    asked = []
    monkeypatch.setattr(s, "_compile", lambda *a: asked.append(a) or "compiled")
    s._seed_canary()
    (source, module, kname), = asked
    name, body, other = _CANARY
    assert kname == kernel_name(name, _CANARY_TEMPLATE) == "custom_kernel_tandem_seed_canary_3_t_float"
    io = ([("x", "float32", 1)], [("out", "float32")], _CANARY_TEMPLATE)
    assert module == module_name(kname, wrap_source(kname, "", body, *io))
    assert source == wrap_source(kname, "", other, *io) and "x_shape" in source
    assert s._canary_ok
    (tmp_path / (module + ".ptx")).write_bytes(b"code")   # written by an earlier start
    s._canary_ok = False
    s._seed_canary()
    assert s._canary_ok and len(asked) == 1                # MLX's run still decides


def test_a_bundled_app_does_not_seed(monkeypatch):
    """In a frozen app sys.executable is the app itself: no worker could start."""
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    s = Seeder()
    s.start()
    assert s.state == "failed" and s.tools is None


def test_seeding_is_off_where_asked_and_without_cuda(monkeypatch):
    monkeypatch.setenv("TANDEM_KERNEL_SEEDING", "0")
    s = Seeder()
    s.start()
    assert s.state == "off" and not s.check()
    s.note("a", INGREDIENTS)
    assert s._pending == []


def test_the_wrapper_notes_each_instance_once_in_mlx_terms(monkeypatch):
    noted = []
    monkeypatch.setattr(SEEDER, "note", lambda key, ingredients: noted.append(ingredients))
    k = _SeededCudaKernel.__new__(_SeededCudaKernel)
    k._kernel = lambda **kw: kw
    k._spec = ("tandem_x", "// h\n", "body", ["a", "b"], ["y"])
    k._seen = set()
    a, b = mx.zeros((2, 3), mx.bfloat16), mx.zeros((), mx.int32)
    launch = {"grid": (1, 1, 1), "threadgroup": (1, 1, 1), "output_shapes": [(2, 3)]}
    for _ in range(2):
        k(inputs=[a, b], output_dtypes=[mx.float32], template=[("T", mx.bfloat16), ("N", 3)],
          **launch)
    k(inputs=[a, b], output_dtypes=[mx.float32], **launch)
    k(inputs=[a, 1.5], output_dtypes=[mx.float32], **launch)    # MLX picks 1.5's dtype
    assert noted == [
        ("tandem_x", "// h\n", "body", [("a", "bfloat16", 2), ("b", "int32", 0)],
         [("y", "float32")], (("T", "bfloat16"), ("N", 3))),
        ("tandem_x", "// h\n", "body", [("a", "bfloat16", 2), ("b", "int32", 0)],
         [("y", "float32")], ())]


def test_every_cuda_kernel_is_made_through_the_seeding_wrapper():
    """A kernel made with mx.fast.cuda_kernel directly would be compiled in every process."""
    folder = Path(__file__).resolve().parents[2] / "kernels"
    direct = [p.name for p in folder.glob("*.py")
              if "mx.fast.cuda_kernel(" in p.read_text()]
    assert sorted(direct) == ["kernel_build.py", "kernel_seeding.py"]


@pytest.mark.skipif(gpu_backend() != "cuda", reason="MLX's CUDA backend only")
def test_on_cuda_mlx_loads_what_the_seeder_writes():
    SEEDER.start()
    assert SEEDER.check(), SEEDER.summary()


def test_in_a_dry_run_a_kernel_notes_its_instance_and_runs_nothing(monkeypatch):
    noted = []
    monkeypatch.setattr(SEEDER, "note", lambda key, ingredients: noted.append(key))
    k = _SeededCudaKernel.__new__(_SeededCudaKernel)
    k._kernel = lambda **kw: pytest.fail("ran in a dry run")
    k._spec, k._seen = ("tandem_x", "", "body", ["a"], ["y", "z"]), set()
    with SEEDER.dry_run():
        y, z = k(inputs=[mx.ones((2,))], output_dtypes=[mx.float32, mx.int32],
                 output_shapes=[(3,), (1, 2)], grid=(1, 1, 1), threadgroup=(1, 1, 1))
    assert not SEEDER.dry and len(noted) == 1
    assert y.shape == (3,) and z.dtype == mx.int32 and not z.any().item()


def test_the_selftest_notes_every_check_before_running_one(monkeypatch):
    import kernels.selftest as selftest
    seen = []

    def failing(backend):
        seen.append(("failing", SEEDER.dry))
        raise ValueError("zeros tripped it")
    monkeypatch.setattr(selftest, "CHECKS", {
        "a": failing, "b": lambda backend: seen.append(("b", SEEDER.dry)) or 0.0})
    selftest._note_ahead("cuda")
    assert seen == [("failing", True), ("b", True)] and not SEEDER.dry


def test_modules_written_for_another_build_are_removed_once(tmp_path):
    from kernels.kernel_seeding import forget_other_builds
    ours = tmp_path / "custom_kernel_k_1f.ptx"
    nested = tmp_path / ("custom_kernel_" + "a" * 240) / "b.ptx"
    mlx_own = tmp_path / "mlx_kernel_gemm_1.ptx"
    for f in (ours, nested, mlx_own):
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"code")
    forget_other_builds(tmp_path, "sm_90a nvrtc 13.0")
    assert not ours.exists() and not nested.exists() and mlx_own.exists()
    ours.write_bytes(b"code")
    forget_other_builds(tmp_path, "sm_90a nvrtc 13.0")           # the same build: kept
    assert ours.exists()
    forget_other_builds(tmp_path, "sm_100a nvrtc 13.0")          # another GPU: gone
    assert not ours.exists() and mlx_own.exists()


def test_seeding_stops_after_failures_with_nothing_compiled(tmp_path, monkeypatch):
    s, _ = _seeder(tmp_path, 42.0, monkeypatch)
    assert s.check()
    monkeypatch.setattr(s, "_compile", lambda *a: None)          # e.g. a read-only cache
    for n in range(5):
        s._seed(INGREDIENTS[:5] + ((("N", n),),))
    assert s.state == "failed" and s.counts["failed"] == 3
