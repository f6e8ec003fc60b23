"""CORS, x-request-id, models.retrieve, /tokenize and /detokenize, paths without /v1, and
the conformance details clients read (system_fingerprint, usage details, 400 params)."""
from __future__ import annotations

import json
import urllib.error
import urllib.request

import openai
import pytest
from server_harness import MAX_CONTEXT, make_client, post_raw

from engine.server import EngineHolder

USER = [{"role": "user", "content": "hello"}]


def _request(url: str, method: str = "GET", data: bytes | None = None, headers=None):
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def _root(server) -> str:
    return server.url[:-len("/v1")]


def test_cors_is_off_by_default(server):
    status, headers, _ = _request(server.url + "/models", headers={"Origin": "http://x.test"})
    assert status == 200 and "Access-Control-Allow-Origin" not in headers
    status, headers, _ = _request(server.url + "/chat/completions", "OPTIONS", headers={
        "Origin": "http://x.test", "Access-Control-Request-Method": "POST"})
    assert status == 405 and "Access-Control-Allow-Origin" not in headers


def test_cors_origin_allows_a_browser_front_end(serve, engine):
    server = serve(EngineHolder(engine=engine, loading=False),
                   cors_origins=("http://localhost:3000",), api_key="k")
    status, headers, _ = _request(server.url + "/chat/completions", "OPTIONS", headers={
        "Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert status == 204                                   # before the key check
    assert headers["Access-Control-Allow-Origin"] == "http://localhost:3000"
    assert "POST" in headers["Access-Control-Allow-Methods"]
    assert headers["Access-Control-Allow-Headers"] == "authorization, content-type"
    status, headers, _ = _request(server.url + "/models", headers={
        "Origin": "http://localhost:3000", "Authorization": "Bearer k"})
    assert status == 200 and headers["Access-Control-Allow-Origin"] == "http://localhost:3000"
    status, headers, _ = _request(server.url + "/models", headers={
        "Origin": "http://evil.test", "Authorization": "Bearer k"})
    assert "Access-Control-Allow-Origin" not in headers


def test_x_request_id_on_every_response(server):
    status, headers, _ = _request(server.url + "/models")
    assert headers["x-request-id"].startswith("req_")
    _, headers, _ = _request(server.url + "/models", headers={"X-Request-Id": "mine-1"})
    assert headers["x-request-id"] == "mine-1"
    _, headers, _ = _request(server.url + "/nope")
    assert headers["x-request-id"]


def test_models_retrieve(client, engine):
    assert client.models.retrieve(engine.model_name).id == engine.model_name
    with pytest.raises(openai.NotFoundError) as info:
        client.models.retrieve("gpt-4o")
    body = info.value.body
    assert body["code"] == "model_not_found" and body["type"] == "invalid_request_error"


def test_paths_without_v1(server, engine):
    client = make_client(_root(server))
    out = client.chat.completions.create(model=engine.model_name, messages=USER, max_tokens=3)
    assert out.choices[0].message.role == "assistant"
    assert [m.id for m in client.models.list().data] == [engine.model_name]


def test_tokenize_and_detokenize(server, engine):
    tok = engine.tokenizer
    status, body = post_raw(_root(server), "/tokenize",
                            json.dumps({"prompt": "hello world"}).encode())
    assert status == 200 and body["count"] == len(body["tokens"])
    assert body["max_model_len"] == MAX_CONTEXT
    assert tok.decode(body["tokens"]).endswith("hello world")
    status, chat = post_raw(_root(server), "/tokenize", json.dumps({"messages": USER}).encode())
    assert chat["tokens"] == tok.encode_prompt(USER)
    status, llama = post_raw(_root(server), "/tokenize", json.dumps(
        {"content": "hello", "add_special": False, "with_pieces": True}).encode())
    assert [t["id"] for t in llama["tokens"]] == tok.encode("hello")
    status, back = post_raw(server.url, "/detokenize",
                            json.dumps({"tokens": tok.encode("hello world")}).encode())
    assert status == 200 and back["prompt"] == back["content"] == "hello world"
    status, bad = post_raw(_root(server), "/detokenize", b'{"tokens": ["a"]}')
    assert status == 400 and bad["error"]["param"] == "tokens"


def test_fingerprint_and_usage_details(client, engine):
    out = client.chat.completions.create(model=engine.model_name, messages=USER, max_tokens=3)
    assert out.system_fingerprint.startswith("fp_")
    assert out.usage.completion_tokens_details.reasoning_tokens == 0
    chunks = list(client.chat.completions.create(model=engine.model_name, messages=USER,
                                                 max_tokens=3, stream=True))
    assert all(c.system_fingerprint == out.system_fingerprint for c in chunks)


@pytest.mark.parametrize("extra,param", [
    ({"max_tokens": MAX_CONTEXT}, "max_tokens"), ({"n": 2}, "n"),
    ({"logprobs": True, "top_logprobs": 50}, "top_logprobs"),
    ({"top_logprobs": 2}, "top_logprobs"), ({"logit_bias": {"x": 1}}, "logit_bias"),
    ({"logit_bias": {"1": 500}}, "logit_bias"),
])
def test_chat_400s_name_the_field(client, engine, extra, param):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=engine.model_name, messages=USER,
                                       extra_body=extra)
    assert info.value.body["param"] == param


@pytest.mark.parametrize("extra,param", [
    ({"best_of": 3}, "best_of"), ({"echo": True}, "echo"), ({"suffix": "x"}, "suffix"),
    ({"logprobs": 9}, "logprobs"),
])
def test_completion_400s_name_the_field(client, engine, extra, param):
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=engine.model_name, prompt="hi", extra_body=extra)
    assert info.value.body["param"] == param


def test_chat_template_kwargs_reach_the_template(qclient, qwen_engine):
    """Qwen3's template reads enable_thinking (vLLM's chat_template_kwargs)."""
    off = qclient.chat.completions.create(
        model=qwen_engine.model_name, messages=USER, max_tokens=1,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    on = qclient.chat.completions.create(model=qwen_engine.model_name, messages=USER,
                                         max_tokens=1)
    think = len(qwen_engine.tokenizer.encode("<think>\n\n</think>\n\n"))
    assert off.usage.prompt_tokens == on.usage.prompt_tokens + think
    with pytest.raises(openai.BadRequestError) as info:
        qclient.chat.completions.create(model=qwen_engine.model_name, messages=USER,
                                        extra_body={"chat_template_kwargs": {"tools": []}})
    assert info.value.body["param"] == "chat_template_kwargs"


def test_a_long_non_streamed_request_outlasts_the_client_timeout(serve, engine):
    """The client timeout bounds a stalled client, not a reply that takes long to make."""
    import time
    server = serve(EngineHolder(engine=engine, loading=False), client_timeout_s=0.2)
    client = make_client(server.url)
    start = time.monotonic()
    out = client.chat.completions.create(model=engine.model_name, messages=USER,
                                         max_tokens=150, temperature=1.0, seed=1,
                                         logit_bias={str(t): -100 for t in
                                                     engine.tokenizer.eos_token_ids})
    assert out.choices[0].finish_reason == "length"
    if time.monotonic() - start <= 0.2:
        pytest.skip("the reply came within the timeout: too quick to show anything here")
