"""kernels/cuda_source_files.py: MLX gets a kernel's CUDA source as `#include` lines, and
what NVRTC then compiles is the kernel as written, under the same signature."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernels import cuda_source_files, kernel_build
from kernels.cuda_jit_names import shape_names, wrap_source
from kernels.cuda_source_files import ENV_VAR, included
from kernels.kernel_build import KernelBuild


@pytest.fixture(autouse=True)
def include_form(monkeypatch):
    """The include form, whatever the default: what these tests check."""
    monkeypatch.setenv(ENV_VAR, "include")


_INCLUDE = re.compile(r'^#include "(/[^"]+)"\n', re.M)
BODY = "  int n = x_shape[0] + w_ndim;\n  out[0] = x[n];\n"
INPUTS = [("x", "float32", 2), ("w", "bfloat16", 1)]
OUTPUTS = [("out", "float32")]


def _expanded(source: str) -> str:
    """The source with each absolute include replaced by its file's text (what NVRTC reads)."""
    return _INCLUDE.sub(lambda m: Path(m.group(1)).read_text() + "\n", source)


def _signature(wrapped: str) -> str:
    return wrapped[wrapped.index("__global__"):wrapped.index(") {\n")]


def test_the_signature_is_the_one_the_inline_source_gets(tmp_path):
    files = included("tandem_t", "// helpers\n", BODY, ["x", "w"], tmp_path)
    inline = wrap_source("k", "// helpers\n", BODY, INPUTS, OUTPUTS, [("N", 4)])
    short = wrap_source("k", files.header, files.body, INPUTS, OUTPUTS, [("N", 4)])
    assert "x_shape" in _signature(inline) and "x_strides" not in _signature(inline)
    assert _signature(short) == _signature(inline)
    # NVRTC reads the helpers before the namespace and the body inside the function
    text = _expanded(short)
    assert text.index("// helpers") < text.index("namespace") < text.index("__global__") \
        < text.index("constexpr int N = 4;") < text.index(BODY)


def test_mlx_hashes_a_line_instead_of_the_source(tmp_path):
    body = BODY * 400                                          # ~14 KB, as moe_grouped's
    files = included("tandem_t", "// h\n" * 2000, body, ["x", "w"], tmp_path)
    assert len(files.header) + len(files.body) < 300
    assert _expanded(files.body).endswith(body + "\n")


def test_shape_names_are_mlxs_substring_test():
    assert shape_names("a_strides[0] + max_shape", ["a", "x", "ax"]) == [
        "a_strides", "x_shape", "ax_shape"]                  # both inside "max_shape"
    assert shape_names("out[0] = 1;", ["a"]) == []


def test_changed_text_is_a_new_file_so_a_new_module_name(tmp_path):
    a = included("tandem_t", "", BODY, ["x"], tmp_path)
    b = included("tandem_t", "", BODY + "  out[1] = 0;\n", ["x"], tmp_path)
    again = included("tandem_t", "", BODY, ["x"], tmp_path)
    assert a.body != b.body and a.body == again.body and a.header == ""


def test_a_file_removed_while_running_is_written_again(tmp_path):
    files = included("tandem_t", "// h\n", BODY, ["x"], tmp_path)
    for p in _INCLUDE.findall(files.header + files.body):
        Path(p).unlink()
    files.ensure()
    assert all(Path(p).is_file() for p in _INCLUDE.findall(files.header + files.body))


def test_inline_where_asked_or_where_nothing_can_be_written(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert included("tandem_t", "", BODY, ["x"], blocker) is None     # not a folder
    monkeypatch.setenv(ENV_VAR, "inline")
    assert included("tandem_t", "", BODY, ["x"], tmp_path) is None
    monkeypatch.delenv(ENV_VAR)
    monkeypatch.setattr(cuda_source_files, "INCLUDE_BY_DEFAULT", False)
    assert included("tandem_t", "", BODY, ["x"], tmp_path) is None


def test_every_kernel_build_hands_mlx_include_lines(tmp_path, monkeypatch):
    """The deterministic signature of the host cost: the bytes MLX hashes a launch."""
    made = []
    monkeypatch.setattr(kernel_build, "mlx_cache_dir", lambda: tmp_path)
    monkeypatch.setattr(kernel_build.mx.fast, "cuda_kernel", lambda **kw: made.append(kw))
    builds = [v for m in _kernel_modules() for v in vars(m).values()
              if isinstance(v, KernelBuild) and v.sources["cuda"]]
    assert len(builds) >= 15
    for build in builds:
        monkeypatch.setattr(build, "_built", {})     # a GPU run's built kernels stay as they were
        build.get("cuda")
    assert len(made) == len(builds)
    for kw, build in zip(made, builds):
        hashed = len(kw["header"]) + len(kw["source"])     # paths and the shape names
        assert hashed < 600 and hashed < len(build.sources["cuda"]), build.name
        assert _expanded(kw["source"]).rstrip().endswith(build.sources["cuda"].rstrip())


def _kernel_modules():
    import importlib
    import pkgutil

    import kernels
    return [importlib.import_module(f"kernels.{m.name}") for m in pkgutil.iter_modules(kernels.__path__)
            if not m.name.startswith(("selftest", "nvrtc_worker", "stand_in"))]
