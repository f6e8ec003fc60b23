"""kernels/cuda_jit_names.py against what MLX 0.32 does (custom_kernel.cpp, jit_module.cpp)
and against libstdc++ itself: a wrong byte anywhere gives another module name, and MLX
then compiles the kernel itself as before (the canary in kernel_seeding says so)."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from kernels.cuda_jit_names import kernel_name, module_name, module_path, std_hash, wrap_source

# std::hash<std::string> of each string, printed by a program built with g++ 12
# (libstdc++'s _Hash_bytes): the empty string, shorter than, exactly, one past and
# several words long, and bytes above 0x7f (the tail is read unsigned).
KNOWN = {b"": 0x553E93901E462A6E, b"a": 0x454DDEE488C1ED6B,
         b"abcdefgh": 0x783DB3E38DB898BB, b"abcdefghi": 0xB4EC9257851C8AAF,
         b"hello world, this is a longer string of 45 b": 0xDC216B1501D7D4CF}


def test_the_hash_is_libstdcxx_string_hash():
    for data, expected in KNOWN.items():
        assert std_hash(data) == expected, data


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ to ask libstdc++")
def test_the_hash_agrees_with_this_machines_libstdcxx(tmp_path):
    program = tmp_path / "h.cpp"
    program.write_text('#include <cstdio>\n#include <iostream>\n#include <iterator>\n'
                       '#include <string>\nint main() { std::string s('
                       '(std::istreambuf_iterator<char>(std::cin)), '
                       'std::istreambuf_iterator<char>());\n'
                       'printf("%zx\\n", std::hash<std::string>{}(s)); }\n')
    subprocess.run(["g++", "-O1", "-o", str(tmp_path / "h"), str(program)], check=True)
    for data in (b"x" * 7, b"\xff\xfe\x80 tail", "©2025 ütf-8".encode(), bytes(range(256))):
        out = subprocess.run([str(tmp_path / "h")], input=data, capture_output=True, check=True)
        assert int(out.stdout, 16) == std_hash(data), data


def test_template_arguments_name_the_kernel_as_mlx_does():
    # bool before int (a Python bool is an int), dtypes by get_type_string's names
    assert kernel_name("k", ()) == "custom_kernel_k"
    assert (kernel_name("k", [("T", "bfloat16"), ("N", 4), ("B", True), ("C", False),
                              ("U", "float32"), ("H", "float16")])
            == "custom_kernel_k_bfloat16_t_4_t_f_float_float16_t")


def test_the_source_is_built_as_mlx_builds_it():
    body = "  y[0] = x[x_strides[0]] + b[0] + s[0];"
    got = wrap_source("custom_kernel_k_4_t", "// mine\n", body,
                      [("x", "bfloat16", 2), ("b", "float32", 1), ("s", "int32", 0)],
                      [("y", "float32"), ("z", "uint32")], [("N", 4), ("B", True)])
    assert got == (
        '\n#include "mlx/backend/cuda/device/utils.cuh"\n\n#include <cooperative_groups.h>\n\n'
        "// mine\n"
        "namespace mlx::core::cu {\n\nnamespace cg = cooperative_groups;\n\n"
        "__global__ void custom_kernel_k_4_t(\n"
        "    const __nv_bfloat16* x,\n"
        "    const __grid_constant__ Strides x_strides,\n"
        "    const float* b,\n"
        "    const int32_t* s,\n"
        "    float* y,\n"
        "    uint32_t* z) {\n"
        "  constexpr int N = 4;\n"
        "  constexpr bool B = true;\n"
        "\n" + body + "\n}\n\n} // namespace mlx::core::cu\n")


def test_shape_arguments_only_for_names_the_body_uses_and_arrays_with_a_shape():
    body = "a_shape[0]; a_ndim; c_shape[0];"
    got = wrap_source("f", "", body, [("a", "float32", 3), ("b", "float32", 3),
                                      ("c", "float32", 0)], [("o", "float32")], ())
    assert "Shape a_shape" in got and "int a_ndim" in got and "Strides a_strides" not in got
    assert "b_shape" not in got and "Shape c_shape" not in got
    assert "constexpr" not in got and "  using" not in got


def test_module_names_and_paths():
    source = wrap_source("custom_kernel_k", "", "", [], [("o", "float32")], ())
    assert module_name("custom_kernel_k", source) == (
        f"custom_kernel_k_{std_hash(source.encode()):x}")
    assert str(module_path("/c", "m")) == "/c/m.ptx"
    long = "a" * 245 + "b" * 245 + "c" * 10
    assert str(module_path("/c", long)) == f"/c/{'a' * 245}/{'b' * 245}/{'c' * 10}.ptx"
    assert str(module_path("/c", "a" * 245)) == f"/c/{'a' * 245}.ptx"
