"""Issue 26 item 3: broken model folders. Each is a ModelLoadError naming the file and the
field (or tensor), and the next load of a good folder works. All are loaded in one
subprocess, so a regression that crashes MLX (a read past a file) fails the test instead
of killing pytest."""
from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
from reliability_util import run_script
from tiny_models import tiny_llama_config, write_tiny_llama

WEIGHTS = "model.safetensors"


def _split(path: Path) -> tuple[dict, bytes]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def _join(path: Path, header: dict, data: bytes) -> None:
    head = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(head)) + head + data)


def _tensor_names(header: dict) -> list[str]:
    return sorted(k for k in header if k != "__metadata__")


def huge_header_length(folder):
    raw = (folder / WEIGHTS).read_bytes()
    (folder / WEIGHTS).write_bytes(struct.pack("<Q", 1 << 60) + raw[8:])
    return [WEIGHTS, "header length"]


def header_length_past_the_end(folder):
    raw = (folder / WEIGHTS).read_bytes()
    (folder / WEIGHTS).write_bytes(struct.pack("<Q", len(raw)) + raw[8:])
    return [WEIGHTS, "header length"]


def header_not_json(folder):
    header, data = _split(folder / WEIGHTS)
    head = json.dumps(header).encode()
    garbage = bytes(range(256)) * (len(head) // 256 + 1)
    (folder / WEIGHTS).write_bytes(struct.pack("<Q", len(head)) + garbage[:len(head)] + data)
    return [WEIGHTS, "not JSON"]


def header_a_list(folder):
    _, data = _split(folder / WEIGHTS)
    _join(folder / WEIGHTS, [1, 2, 3], data)
    return [WEIGHTS, "not an object"]


def offsets_past_the_end(folder):
    header, data = _split(folder / WEIGHTS)
    name = _tensor_names(header)[0]
    begin, end = header[name]["data_offsets"]
    header[name]["data_offsets"] = [begin + len(data), end + len(data)]
    _join(folder / WEIGHTS, header, data)
    return [WEIGHTS, name, "ends at byte"]


def overlapping_offsets(folder):
    header, data = _split(folder / WEIGHTS)
    a, b = [n for n in _tensor_names(header) if "norm" in n][:2]     # same shape: (64,)
    header[b]["data_offsets"] = list(header[a]["data_offsets"])
    _join(folder / WEIGHTS, header, data)
    return [WEIGHTS, "overlap"]


def span_does_not_match_shape(folder):
    header, data = _split(folder / WEIGHTS)
    name = _tensor_names(header)[0]
    header[name]["shape"] = [s * 2 for s in header[name]["shape"]]
    _join(folder / WEIGHTS, header, data)
    return [WEIGHTS, name, "needs"]


def unknown_dtype(folder):
    header, data = _split(folder / WEIGHTS)
    name = _tensor_names(header)[0]
    header[name]["dtype"] = "F7"
    _join(folder / WEIGHTS, header, data)
    return [WEIGHTS, name, "dtype"]


def negative_dimension(folder):
    header, data = _split(folder / WEIGHTS)
    name = _tensor_names(header)[0]
    header[name]["shape"] = [-1, *header[name]["shape"][1:]]
    _join(folder / WEIGHTS, header, data)
    return [WEIGHTS, name, "shape"]


def truncated(folder):
    raw = (folder / WEIGHTS).read_bytes()
    (folder / WEIGHTS).write_bytes(raw[: len(raw) // 2])
    return [WEIGHTS, "ends at byte"]


def empty_file(folder):
    (folder / WEIGHTS).write_bytes(b"")
    return [WEIGHTS, "shorter"]


def garbage_tokenizer(folder):
    (folder / "tokenizer.json").write_bytes(bytes(range(256)) * 8)
    return ["tokenizer.json"]


def tokenizer_of_the_wrong_shape(folder):
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"type": "Nonsense"}}))
    return ["tokenizer.json"]


def _config(folder, **over):
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(over)
    (folder / "config.json").write_text(json.dumps(cfg))


def absurd_hidden_size(folder):
    _config(folder, hidden_size=10 ** 9)
    return ["config.json", "'hidden_size' is 1000000000"]


def absurd_layer_count(folder):
    _config(folder, num_hidden_layers=10 ** 9)
    return ["config.json", "'num_hidden_layers'"]


def absurd_vocabulary(folder):
    _config(folder, vocab_size=10 ** 13)
    return ["config.json", "'vocab_size'"]


def absurd_ffn(folder):
    _config(folder, intermediate_size=10 ** 12)
    return ["config.json", "'intermediate_size'"]


def config_of_a_bigger_model(folder):
    _config(folder, hidden_size=4096)            # plausible, but not these 0.4 MB of weights
    return ["config.json", "'hidden_size' 4096", "does not belong"]


def weights_of_the_wrong_shape(folder):
    other = write_tiny_llama(folder.parent / "narrow",
                             config=tiny_llama_config(intermediate_size=96))
    shutil.copy(other / WEIGHTS, folder / WEIGHTS)
    return [WEIGHTS, "mlp", "(96, 64)", "(128, 64)"]


FAULTS = [huge_header_length, header_length_past_the_end, header_not_json, header_a_list,
          offsets_past_the_end, overlapping_offsets, span_does_not_match_shape, unknown_dtype,
          negative_dimension, truncated, empty_file, garbage_tokenizer,
          tokenizer_of_the_wrong_shape, absurd_hidden_size, absurd_layer_count,
          absurd_vocabulary, absurd_ffn, config_of_a_bigger_model, weights_of_the_wrong_shape]

_LOADER = r"""
import json, sys
from engine import Engine, EngineConfig, SamplingParams, TandemError
from engine.errors import ModelLoadError
cfg = EngineConfig(num_pages=16, page_size=4)
out = {}
for folder in sys.argv[2:]:
    try:
        Engine.load(folder, cfg).close()
        out[folder] = ["loaded", ""]
    except ModelLoadError as e:
        out[folder] = ["ModelLoadError", str(e)]
    except Exception as e:
        out[folder] = [type(e).__name__, str(e)]
with Engine.load(sys.argv[1], cfg) as e:      # the next load works
    out["good"] = e.generate(["hello"], SamplingParams(max_tokens=3, temperature=0))[0].text
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def results(tiny_folder, tmp_path_factory):
    root = tmp_path_factory.mktemp("broken")
    expected = {}
    for fault in FAULTS:
        folder = root / fault.__name__ / "llama"
        shutil.copytree(tiny_folder, folder)
        expected[str(folder)] = fault(folder)
    run = run_script(_LOADER, str(tiny_folder), *expected)
    assert run.returncode == 0, run.stderr[-3000:]
    return expected, json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.__name__)
def test_a_broken_folder_is_a_typed_error_naming_file_and_field(results, fault):
    expected, got = results
    folder = next(f for f in expected if Path(f).parent.name == fault.__name__)
    kind, message = got[folder]
    assert kind == "ModelLoadError", (kind, message)
    for words in expected[folder]:
        assert words in message, (words, message)


def test_the_next_load_works(results):
    assert isinstance(results[1]["good"], str)


def test_an_intact_file_passes_the_header_check(tiny_folder):
    from engine.loading.safetensors_check import check_safetensors
    check_safetensors(tiny_folder / WEIGHTS)
