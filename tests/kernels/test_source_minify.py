"""kernels/source_minify.py: MLX gets our CUDA sources without comments; the tokens must
be exactly the ones written. Checked against g++'s own comment removal
(`-fpreprocessed -E`: comments out, no macro expanded, no file included) on every CUDA
source string of the kernels package, and on the cases a comment stripper gets wrong."""
import importlib
import pkgutil
import shutil
import subprocess

import pytest

import kernels
from kernels.source_minify import minify_c


def _tokens_by_gcc(src: str, tmp_path) -> list[str]:
    path = tmp_path / "k.cu"
    path.write_text(src)
    out = subprocess.run(["g++", "-fpreprocessed", "-E", "-P", "-x", "c++", str(path)],
                         capture_output=True, text=True, check=True).stdout
    return out.split()


def _cuda_sources() -> dict[str, str]:
    """Every module-level string of kernels/ (alone, or in a tuple, list or dict one level
    down) that reads as CUDA code."""
    found = {}
    for info in pkgutil.iter_modules(kernels.__path__):
        module = importlib.import_module(f"kernels.{info.name}")
        for attr, value in vars(module).items():
            values = value.values() if isinstance(value, dict) else (
                value if isinstance(value, (tuple, list)) else [value])
            for i, v in enumerate(values):
                for w in (v if isinstance(v, (tuple, list)) else [v]):
                    if isinstance(w, str) and ("threadIdx" in w or "__device__" in w):
                        found[f"{info.name}.{attr}[{i}]"] = w
    return found


def test_the_cases_a_comment_stripper_gets_wrong():
    src = ('  asm("lop3.b32 %0, %1; // not a comment");  // a comment\n'
           "  const char c = '/'; int a/**/b; /* two\n lines */ x = 1;\n"
           "#define TWO(a) \\\n\n  (a + a)\n"
           "#pragma unroll\n   for (;;) {}\n")
    got = minify_c(src)
    assert got == ('asm("lop3.b32 %0, %1; // not a comment");\n'
                   "const char c = '/'; int a b;   x = 1;\n"
                   "#define TWO(a) \\\n\n(a + a)\n"
                   "#pragma unroll\nfor (;;) {}\n")
    assert minify_c(got) == got


def test_the_kernels_sources_shrink():
    sources = _cuda_sources()
    assert len(sources) >= 20                      # the scan found the package's kernels
    written = sum(map(len, sources.values()))
    assert sum(len(minify_c(s)) for s in sources.values()) < 0.8 * written


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ to strip comments with")
def test_every_cuda_source_keeps_its_tokens(tmp_path):
    for where, src in _cuda_sources().items():
        assert _tokens_by_gcc(minify_c(src), tmp_path) == _tokens_by_gcc(src, tmp_path), where
