"""A damaged GGUF file is refused with a typed error naming it, never a crash (issue 17 item 2).

MLX's GGUF reader trusts the header's counts, so before the check a flipped bit
killed the process with SIGSEGV. Each corrupt file is loaded in a subprocess:
a regression then fails its test instead of killing pytest.
"""
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from builtin_gguf import builtin_gguf

from engine.errors import ModelLoadError
from engine.loading.gguf_check import check_gguf

ROOT = Path(__file__).resolve().parents[2]
LOAD = """
import sys
from engine.errors import ModelLoadError
from engine.loading.loader import load_model
try:
    load_model(sys.argv[1])
except ModelLoadError as e:
    print("ModelLoadError:", e)
    sys.exit(3)
print("loaded")
"""


def _flip(data: bytearray, at: int) -> None:
    data[at] ^= 1


def _field_after_key(data: bytearray, key: bytes, skip: int) -> int:
    """Byte position `skip` bytes past the end of the length-prefixed string `key`."""
    at = bytes(data).index(struct.pack("<Q", len(key)) + key)
    return at + 8 + len(key) + skip


def _set_u64(data: bytearray, at: int, value: int) -> None:
    data[at:at + 8] = struct.pack("<Q", value)


def _set_u32(data: bytearray, at: int, value: int) -> None:
    data[at:at + 4] = struct.pack("<I", value)


def _tensor_field(data: bytearray, name: bytes, field: str) -> int:
    """Position of a tensor-table field of `name`: n_dims, type or offset."""
    n_dims_at = _field_after_key(data, name, 0)
    n_dims = struct.unpack_from("<I", data, n_dims_at)[0]
    type_at = n_dims_at + 4 + 8 * n_dims
    return {"n_dims": n_dims_at, "type": type_at, "offset": type_at + 4}[field]


CORRUPTIONS = {
    # name: (how to damage a copy of the built-in model, words the error must contain)
    "tensor count bit (byte 13)": (lambda d: _flip(d, 13), "tensors"),
    "key/value count bit (byte 20)": (lambda d: _flip(d, 20), "key/values"),
    "magic": (lambda d: d.__setitem__(slice(0, 4), b"GGUX"), "magic"),
    "version": (lambda d: _set_u32(d, 4, 7), "version 7"),
    "huge key length": (lambda d: _set_u64(d, 24, 1 << 60), "key 0"),
    "huge string length": (lambda d: _set_u64(d, _field_after_key(
        d, b"general.architecture", 4), 1 << 62), "general.architecture"),
    "huge array length": (lambda d: _set_u64(d, _field_after_key(
        d, b"tokenizer.ggml.tokens", 8), 1 << 40), "tokenizer.ggml.tokens"),
    "unknown value type": (lambda d: _set_u32(d, _field_after_key(
        d, b"general.architecture", 0), 77), "unknown value type 77"),
    "bad tensor offset": (lambda d: _set_u64(d, _tensor_field(
        d, b"token_embd.weight", "offset"), 1 << 40), "token_embd.weight"),
    "misaligned tensor offset": (lambda d: _set_u64(d, _tensor_field(
        d, b"output_norm.weight", "offset"), 33), "alignment"),
    "unknown tensor type": (lambda d: _set_u32(d, _tensor_field(
        d, b"output_norm.weight", "type"), 200), "unknown type id 200"),
    "too many dimensions": (lambda d: _set_u32(d, _tensor_field(
        d, b"output_norm.weight", "n_dims"), 9), "9 dimensions"),
}


def _damaged_copy(tmp_path: Path, damage, keep: int | None = None) -> Path:
    target = tmp_path / "damaged.gguf"
    shutil.copyfile(builtin_gguf(), target)
    with open(target, "r+b") as f:
        head = bytearray(f.read(8 << 20))          # header and tables live in the first MBs
        damage(head)
        f.seek(0)
        f.write(head)
        if keep is not None:
            f.truncate(keep)
    return target


def _load_in_subprocess(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", LOAD, str(path)], cwd=ROOT, timeout=300,
                          capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_corrupt_file_is_refused_not_a_crash(tmp_path, name):
    damage, words = CORRUPTIONS[name]
    path = _damaged_copy(tmp_path, damage)
    run = _load_in_subprocess(path)
    assert run.returncode == 3, f"exit {run.returncode}\n{run.stdout}\n{run.stderr[-2000:]}"
    assert "damaged.gguf is not a valid GGUF file" in run.stdout and words in run.stdout


@pytest.mark.parametrize("keep", [10, 30, 4000, 1 << 20, 60_000_000])
def test_truncated_file_is_refused(tmp_path, keep):
    path = _damaged_copy(tmp_path, lambda d: None, keep=keep)
    with pytest.raises(ModelLoadError, match="damaged.gguf is not a valid GGUF file"):
        check_gguf(path)


def test_truncated_file_load_in_subprocess(tmp_path):
    run = _load_in_subprocess(_damaged_copy(tmp_path, lambda d: None, keep=50_000_000))
    assert run.returncode == 3 and "ends past the end of the file" in run.stdout, run.stderr


def test_empty_and_intact_files(tmp_path):
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(ModelLoadError, match="empty.gguf is not a valid GGUF file: it is empty"):
        check_gguf(empty)
    check_gguf(builtin_gguf())          # the shipped model passes
