"""A broken config.json or weights file says which file and key is wrong (issue 17 item 12)."""
import json

import pytest
from tiny_models import tiny_llama_config, write_tiny_llama

from engine.errors import ModelLoadError
from engine.loading import gguf
from engine.loading.loader import load_model


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("good"))


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("q4"), quantized=True)


def _with_config(tmp_path, source, config) -> str:
    for f in source.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    (tmp_path / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    return str(tmp_path)


def _without(key):
    return {k: v for k, v in tiny_llama_config().items() if k != key}


@pytest.mark.parametrize("config, match", [
    ([1, 2, 3], r"config.json holds a JSON list, not an object"),
    ('"llama"', r"config.json holds a JSON str"),
    ({**tiny_llama_config(), "model_type": 3}, r"'model_type' must name the architecture .* got 3"),
    (_without("model_type"), r"'model_type' must name the architecture .* got None"),
    ({**tiny_llama_config(), "text_config": 5}, r"'text_config' must be an object"),
    (_without("num_attention_heads"), r"config.json: the required key 'num_attention_heads'"),
    (_without("vocab_size"), r"the required key 'vocab_size' is missing"),
    ({**tiny_llama_config(), "hidden_size": "64"}, r"'hidden_size' must be an integer, got str"),
    ({**tiny_llama_config(), "num_hidden_layers": 2.0}, r"'num_hidden_layers' must be an integer"),
    ({**tiny_llama_config(), "num_attention_heads": 0}, r"'num_attention_heads' is 0; it must be"),
    ({**tiny_llama_config(), "rms_norm_eps": "small"}, r"'rms_norm_eps' must be a number"),
    ({**tiny_llama_config(), "tie_word_embeddings": "yes"}, r"'tie_word_embeddings' must be true"),
    ({**tiny_llama_config(), "num_key_value_heads": 3}, r"multiple of num_key_value_heads"),
    ({**tiny_llama_config(), "quantization": 4}, r"'quantization' must be an object"),
])
def test_bad_config_names_file_and_key(tmp_path, good, config, match):
    with pytest.raises(ModelLoadError, match=match) as err:
        load_model(_with_config(tmp_path, good, config))
    assert str(tmp_path / "config.json") in str(err.value) or "config.json" in str(err.value)


def test_unknown_and_null_optional_keys_are_ignored(tmp_path, good):
    config = {**tiny_llama_config(), "architectures": ["LlamaForCausalLM"], "torch_dtype": 7,
              "head_dim": None}
    assert load_model(_with_config(tmp_path, good, config)).model is not None


def test_qwen3_5_missing_text_key_is_named(tmp_path, good):
    config = {"model_type": "qwen3_5", "text_config": {"hidden_size": 64}}
    with pytest.raises(ModelLoadError, match=r"required key 'num_attention_heads' is missing"):
        load_model(_with_config(tmp_path, good, config))
    config["text_config"]["num_hidden_layers"] = "2"
    with pytest.raises(ModelLoadError, match=r"'num_hidden_layers' must be an integer, got str"):
        load_model(_with_config(tmp_path, good, config))


def test_bits_mismatch_reports_logical_shapes(tmp_path, quantized):
    config = json.loads((quantized / "config.json").read_text())
    config["quantization"] = {"group_size": 32, "bits": 8}       # the file holds 4-bit weights
    with pytest.raises(ModelLoadError) as err:
        load_model(_with_config(tmp_path, quantized, config))
    message = str(err.value)
    # 64 wide: packed that is 8 (4-bit) or 16 (8-bit) uint32 columns; say 64, and the bits.
    assert ", 64) at 4 bits but the config implies" in message and ", 64) at 8 bits" in message
    assert ", 8)" not in message and ", 16)" not in message


def test_wrong_width_reports_logical_shapes(tmp_path, quantized):
    config = json.loads((quantized / "config.json").read_text())
    config["intermediate_size"] = 96
    with pytest.raises(ModelLoadError, match=r"has shape \(128, 64\) at 4 bits but the config "
                                             r"implies \(96, 64\) at 4 bits"):
        load_model(_with_config(tmp_path, quantized, config))


def test_gguf_metadata_without_required_key_is_named():
    meta = {"general.architecture": "llama", "llama.attention.head_count": 4,
            "llama.embedding_length": 64, "llama.block_count": 2}
    with pytest.raises(ModelLoadError, match=r"x.gguf has no metadata key "
                                             r"'llama.feed_forward_length'"):
        gguf.gguf_config(meta, {"token_embd.weight": None}, "x.gguf")
