"""Tools and tool-call histories rendered by the model's own template, checked against
transformers' apply_chat_template on the same template (Qwen3's, as shipped)."""
from __future__ import annotations

import json

import pytest
from test_tokenizer import CHATML, QWEN3
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models

from engine.errors import InvalidRequestError
from engine.tokenization.chat_prompt import ChatPrompt, template_support
from engine.tokenization.tokenizer import Tokenizer

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather now in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]
HISTORY = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Zürich and Bern?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": {"city": "Zürich"}}},
        {"id": "call_2", "type": "function",
         "function": {"name": "get_weather", "arguments": {"city": "Bern"}}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "12°C"},
    {"role": "tool", "tool_call_id": "call_2", "content": "10°C"},
]


def _tokenizer(template: str) -> Tokenizer:
    vocab = {"<|im_start|>": 0, "<|im_end|>": 1, "a": 2}
    hf = HFTokenizer(models.WordLevel(vocab, unk_token="a"))
    return Tokenizer(hf, chat_template=template, special_tokens={"eos_token": "<|im_end|>"},
                     eos_token_ids=[1], bos_token_id=None)


def _transformers(template: str, messages, tools):
    transformers = pytest.importorskip("transformers")
    hf = HFTokenizer(models.WordLevel({"a": 0}, unk_token="a"))
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=hf, eos_token="<|im_end|>")
    return tok.apply_chat_template(messages, tools=tools, chat_template=template,
                                   add_generation_prompt=True, tokenize=False)


@pytest.mark.parametrize("messages,tools", [
    (HISTORY[:2], TOOLS),
    (HISTORY, TOOLS),
    (HISTORY, None),
    ([*HISTORY, {"role": "assistant", "content": "Zürich 12°C, Bern 10°C."},
      {"role": "user", "content": "thanks"}], TOOLS),
])
def test_qwen3_tools_render_as_transformers_does(messages, tools):
    ours = _tokenizer(QWEN3).render_chat(ChatPrompt(messages, tools=tools))
    assert ours == _transformers(QWEN3, messages, tools)
    if tools:
        assert json.dumps(TOOLS[0], ensure_ascii=False) in ours
    if len(messages) > 2:
        assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Bern"}}' in ours
        assert "<tool_response>\n12°C\n</tool_response>" in ours


def test_template_support_is_read_from_the_source():
    assert template_support(QWEN3).tools and template_support(QWEN3).tool_calls
    plain = template_support(CHATML)
    assert not plain.tools and not plain.tool_calls and not plain.tool_role


def test_a_template_without_tools_refuses_them():
    with pytest.raises(InvalidRequestError, match="tool"):
        _tokenizer(CHATML).render_chat(ChatPrompt(HISTORY[:2], tools=TOOLS))


def test_a_template_without_tool_calls_keeps_them_as_text():
    """ChatML never reads tool_calls: the calls and results are folded, not dropped."""
    ours = _tokenizer(CHATML).render_chat(ChatPrompt(HISTORY))
    assert ours == (
        "<|im_start|>system\nYou are terse.<|im_end|>\n"
        "<|im_start|>user\nWeather in Zürich and Bern?<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Zürich"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Bern"}}\n</tool_call>'
        "<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n12°C\n</tool_response>\n"
        "<tool_response>\n10°C\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n")


def test_the_builtin_model_has_no_tool_format_but_keeps_tool_history():
    from builtin_gguf import builtin_tokenizer
    tok = builtin_tokenizer()
    assert not template_support(tok.chat_template).tools
    with pytest.raises(InvalidRequestError, match="tool"):
        tok.encode_prompt(ChatPrompt(HISTORY[:2], tools=TOOLS))
    rendered = tok.render_chat(ChatPrompt(HISTORY))
    assert '{"name": "get_weather", "arguments": {"city": "Bern"}}' in rendered
    assert "<tool_response>\n10°C\n</tool_response>" in rendered


def test_an_xml_style_template_renders_as_transformers_does():
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent / "server"))
    from xml_template import XML_TOOLS
    assert template_support(XML_TOOLS).call_format == "xml"
    assert template_support(QWEN3).call_format == "json"
    history = [*HISTORY[:2], {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather",
                                          "arguments": {"city": "Bern", "days": 2}}}]},
               HISTORY[3]]
    ours = _tokenizer(XML_TOOLS).render_chat(ChatPrompt(history, tools=TOOLS))
    assert ours == _transformers(XML_TOOLS, history, TOOLS)
    assert "<function=get_weather>\n<parameter=city>\nBern\n</parameter>\n" \
           "<parameter=days>\n2\n</parameter>\n</function>" in ours
