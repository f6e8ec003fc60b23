"""Bad input gets OpenAI-style error JSON with the right status, never a traceback."""
from __future__ import annotations

import json

import openai
import pytest
from server_harness import MAX_CONTEXT, make_client, post_raw

from engine.server import EngineHolder, ServerConfig

USER = [{"role": "user", "content": "hello"}]


def _error(status_error: openai.APIStatusError) -> dict:
    body = status_error.response.json()
    assert set(body) == {"error"} and isinstance(body["error"]["message"], str)
    assert "Traceback" not in status_error.response.text
    return body["error"]


def _raises(status: int, fn, **kw) -> dict:
    with pytest.raises(openai.APIStatusError) as info:
        fn(**kw)
    assert info.value.status_code == status
    return _error(info.value)


def test_malformed_body_is_400(server):
    for data in (b"{not json", b"[1, 2]", b"\xff\xfe", b""):
        status, body = post_raw(server.url, "/chat/completions", data)
        assert status == 400 and body["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("field,value", [
    ("temperature", "hot"), ("max_tokens", 1.5), ("max_tokens", 0), ("top_p", True),
    ("stream", "yes"), ("stop", 3), ("seed", "x"), ("top_k", 2.5), ("n", 2),
    ("messages", [{"role": "wizard", "content": "hi"}]), ("messages", ["hi"]),
    ("messages", [{"role": "user", "content": [{"type": "image_url"}]}]),
])
def test_wrong_field_types_are_400_naming_the_field(client, engine, field, value):
    kw = {"model": engine.model_name, "messages": USER, "extra_body": {field: value}}
    err = _raises(400, client.chat.completions.create, **kw)
    assert err["param"] and err["param"].split("[")[0] in (field, "messages")


def test_empty_messages_is_400(client, engine):
    err = _raises(400, client.chat.completions.create, model=engine.model_name, messages=[])
    assert err["param"] == "messages"


def test_prompt_longer_than_context_is_400(client, engine):
    long = [{"role": "user", "content": "hello world " * MAX_CONTEXT}]
    err = _raises(400, client.chat.completions.create, model=engine.model_name, messages=long)
    assert err["code"] == "context_length_exceeded" and "context" in err["message"]
    err = _raises(400, client.completions.create, model=engine.model_name,
                  prompt=list(range(1, MAX_CONTEXT + 5)))
    assert err["code"] == "context_length_exceeded"


def test_token_ids_outside_the_vocabulary_are_400(client, engine):
    err = _raises(400, client.completions.create, model=engine.model_name,
                  prompt=[1, 2, 10 ** 6])
    assert "vocabulary" in err["message"]


def test_unknown_model_is_404(client, engine):
    err = _raises(404, client.chat.completions.create, model="gpt-4o", messages=USER)
    assert err["code"] == "model_not_found" and engine.model_name in err["message"]


def test_unknown_endpoint_is_404_json(server):
    status, body = post_raw(server.url, "/embeddings", b"{}")
    assert status == 404
    # The list is read from the router: every endpoint is in it (it once left out
    # /v1/messages and /v1/responses, added after the list was typed in).
    listed = body["error"]["message"]
    for endpoint in ("POST /v1/chat/completions", "POST /v1/responses", "POST /v1/messages",
                     "POST /v1/messages/count_tokens", "GET /health", "POST /v1/tokenize"):
        assert endpoint in listed, endpoint


def test_body_too_large_and_wrong_method_are_json(serve, engine):
    server = serve(EngineHolder(engine=engine, loading=False), max_body_bytes=4096)
    status, body = post_raw(server.url, "/chat/completions",
                            json.dumps({"messages": [{"role": "user",
                                                      "content": "x" * 8000}]}).encode())
    assert status == 413 and "too large" in body["error"]["message"]
    with pytest.raises(openai.APIStatusError) as info:
        make_client(server.url).get("/chat/completions", cast_to=object)
    assert info.value.status_code == 405 and _error(info.value)["message"]


def test_api_key_required_when_set(serve, engine):
    holder = EngineHolder(engine=engine, loading=False)
    server = serve(holder, api_key="s3cret")
    for key in ("none", "wrong"):
        err = _raises(401, make_client(server.url, api_key=key).models.list)
        assert err["code"] == "invalid_api_key"
    status, _ = post_raw(server.url, "/chat/completions",
                         json.dumps({"messages": USER}).encode())
    assert status == 401
    ok = make_client(server.url, api_key="s3cret").chat.completions.create(
        model=engine.model_name, messages=USER, max_tokens=2)
    assert ok.usage.completion_tokens >= 1


def test_503_while_the_model_loads_then_serves(serve, engine):
    holder = EngineHolder(engine=None, loading=True)
    client = make_client(serve(holder).url)
    err = _raises(503, client.chat.completions.create, model="any", messages=USER)
    assert err["code"] == "model_loading"
    _raises(503, client.models.list)
    holder.engine, holder.loading = engine, False
    assert [m.id for m in client.models.list().data] == [engine.model_name]


def test_refuses_an_address_in_use(serve, engine):
    from engine.errors import ServerStartError
    first = serve(EngineHolder(engine=engine, loading=False))
    with pytest.raises(ServerStartError, match="another port"):
        serve(EngineHolder(engine=engine, loading=False), port=first.server.port)


def test_binding_beyond_loopback_warns():
    for host in ("127.0.0.1", "::1", "localhost"):
        assert ServerConfig(host=host).exposure_warning() is None
    assert "no API key" in ServerConfig(host="0.0.0.0").exposure_warning()
    assert "reachable" in ServerConfig(host="192.168.1.5", api_key="k").exposure_warning()
    assert ServerConfig().host == "127.0.0.1"
