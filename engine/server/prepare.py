"""A checked request made ready for the engine: token ids and the SamplingParams to run.

The prompt is tokenized here (not in Engine.submit) so that what depends on its length
(max_tokens against the context) and on the tokenizer (logit_bias ids, a grammar built
over its vocabulary, tools the template must render) is checked before it is queued.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from engine.sampling_params import SamplingParams
from engine.server import grammar
from engine.server.api_error import bad_request
from engine.server.call_grammar import call_grammar
from engine.server.limits import check_context
from engine.tokenization.chat_prompt import ChatPrompt, template_support
from engine.tokenization.messages import check_text


@dataclass(frozen=True)
class Prepared:
    ids: list[int]
    sampling: SamplingParams
    # Split the reply's <think> reasoning: None, no (not chat, or the template never
    # thinks); True, the prompt leaves <think> open; False, if the reply opens one.
    reasoning: bool | None = None


def prepare(engine, req) -> Prepared:
    tok = engine.tokenizer
    ids = chat_ids(tok, req) if req.kind == "chat" else text_ids(tok, req.prompt)
    max_context = engine.config.max_context
    sampling = req.sampling_for(max_context)
    check_context(len(ids), sampling.max_tokens if req.max_tokens_given else None,
                  max_context, req.kind)
    vocab = engine.vocab_size
    for token, _ in sampling.logit_bias:
        if token >= vocab:
            raise bad_request(f"'logit_bias' names token {token}, outside the vocabulary "
                              f"(0 to {vocab - 1}).", "logit_bias")
    thinking = req.kind == "chat" and _thinking_open(tok, ids)
    rule = _grammar(tok, req.extras, thinking)
    if rule is not None:
        constraint = grammar.make_grammar(tok, vocab, rule, req.extras.grammar_param)
        sampling = dataclasses.replace(sampling, constraint=constraint)
    thinks = req.kind == "chat" and template_support(tok.chat_template).thinks
    return Prepared(ids, sampling, thinking if thinks else None)


def _thinking_open(tok, ids: list[int]) -> bool:
    """Does the prompt end inside an open <think> block (the generation prompt's)?"""
    return tok.decode(ids[-6:]).rstrip().endswith("<think>")


def _grammar(tok, extras, thinking: bool) -> str | None:
    """response_format's grammar, or a forced tool call's in the template's format (after
    the model's reasoning, when the prompt leaves a `<think>` block open)."""
    tools = extras.tools
    if tools is None or not tools.forced:
        return extras.grammar
    style = template_support(tok.chat_template).call_format
    return grammar.lark_grammar(call_grammar(tools.forced, tools.parallel, style, thinking))


def chat_ids(tok, req) -> list[int]:
    """The prompt's ids: the chat template with the tools it can show (400 if none)."""
    tools = req.extras.tools
    rendered = tools.rendered if tools else None
    if rendered and not template_support(tok.chat_template).tools:
        raise bad_request("This model's chat template has no tool format (it never reads "
                          "`tools`), so it cannot be shown tools; send the request without "
                          "'tools' (or with 'tool_choice': 'none').", "tools")
    return tok.encode_prompt(ChatPrompt(req.prompt, tools=rendered,
                                        template_vars=req.extras.template_vars))


def text_ids(tokenizer, prompt: str | list[int]) -> list[int]:
    """A completion prompt is raw text: no chat template, BOS as the tokenizer adds it."""
    if isinstance(prompt, list):
        if max(prompt) >= tokenizer.vocab_size:
            raise bad_request(f"Token id {max(prompt)} is outside the vocabulary "
                              f"(size {tokenizer.vocab_size}).", "prompt")
        return prompt
    ids = tokenizer.encode(check_text(prompt, "The prompt"))
    bos = tokenizer.bos_token_id
    if tokenizer.add_bos_token and (not ids or ids[0] != bos):
        ids = [bos, *ids]
    return ids
