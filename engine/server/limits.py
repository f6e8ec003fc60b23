"""What the server refuses before the engine sees a request, and how long it waits for a
client: the body (its type, its size, its arrival), a prompt and max_tokens against the
context, a stream whose reader stopped reading.

Each refusal is an ApiError in OpenAI's shape, naming the field; a stalled client is
hung up on, and its request cancelled (routes.py frees its pages when the handler ends).
"""
from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import socket

from aiohttp import web

from engine.errors import InvalidRequestError, ModelLoadError, PromptTooLongError
from engine.server.api_error import ApiError, bad_request
from engine.server.server_config import ServerConfig

CONFIG_KEY = web.AppKey("tandem_server_config", ServerConfig)
_JSON_TYPES = ("application/json",)


class ClientStalled(ConnectionError):
    """The client stopped reading a stream for longer than the client timeout."""


def config_of(request: web.Request) -> ServerConfig:
    return request.app.get(CONFIG_KEY) or ServerConfig()


async def read_json(request: web.Request) -> object:
    """The body parsed as JSON: a declared JSON type, within the size limit (aiohttp's
    client_max_size: 413), arrived within the client timeout (408), valid UTF-8 JSON."""
    ctype = request.headers.get("Content-Type")
    if ctype is None or request.content_type not in _JSON_TYPES and \
            not request.content_type.endswith("+json"):
        got = "no Content-Type" if ctype is None else f"Content-Type {ctype!r}"
        raise ApiError(415, f"The request has {got}; send the body as JSON with the header "
                       "'Content-Type: application/json'.", code="unsupported_media_type")
    timeout = config_of(request).client_timeout_s
    try:
        raw = await asyncio.wait_for(request.read(), timeout)
    except TimeoutError:
        raise ApiError(408, f"The request body did not arrive within {timeout:g} s; send "
                       "it whole, with a correct Content-Length.", code="request_timeout") \
            from None
    try:
        return json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as e:   # JSONDecodeError, bad UTF-8, deep nesting
        raise bad_request(f"The request body is not valid JSON ({_short(e)}).") from None


async def send(request: web.Request, resp: web.StreamResponse, data: bytes) -> None:
    """Write a piece of a stream; a client that does not take it within the client
    timeout is hung up on (ClientStalled, a ConnectionError the stream loop ends on)."""
    timeout = config_of(request).client_timeout_s
    try:
        await asyncio.wait_for(resp.write(data), timeout)
    except TimeoutError:
        if request.transport is not None:
            request.transport.abort()          # drop what it never read: memory stays bounded
        raise ClientStalled(f"the client read nothing for {timeout:g} s") from None


def limit_send_buffer(site: web.TCPSite, num_bytes: int) -> None:
    """Cap the kernel's send buffer of every connection the site accepts (they inherit
    the listening socket's): a client that stops reading a stream then stalls the
    server's writes after ~num_bytes, not after megabytes of autotuned buffer, so it is
    noticed within the client timeout and holds little memory. A token stream needs a
    few KB per second; a best effort where the platform refuses the option."""
    server = getattr(site, "_server", None)      # aiohttp keeps the asyncio.Server here
    for sock in getattr(server, "sockets", None) or ():
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, num_bytes)
        except OSError:
            pass


def prompt_ids(engine, messages: list[dict]) -> list[int]:
    """A chat request's messages as token ids: the chat template is rendered here, so
    the prompt's length is known before the engine takes it."""
    try:
        return engine.tokenizer.encode_prompt(messages)
    except (InvalidRequestError, ModelLoadError) as e:   # bad text; the template refused
        raise bad_request(str(e), "messages") from e


def check_context(num_prompt: int, max_tokens: int | None, max_context: int,
                  kind: str) -> None:
    """Refuse a prompt the context cannot hold, and a max_tokens that would run past the
    context's end (as OpenAI and vLLM do, rather than cutting the reply short silently).
    max_tokens None: the reply may run to the context's end."""
    param = "messages" if kind == "chat" else "prompt"
    if num_prompt >= max_context:
        raise ApiError(400, f"The prompt is {num_prompt} tokens; this model's context holds "
                       f"{max_context}. Shorten the prompt or start a new conversation.",
                       param=param, code="context_length_exceeded")
    if max_tokens is not None and num_prompt + max_tokens > max_context:
        raise ApiError(400, f"'max_tokens' is {max_tokens}, but the prompt takes "
                       f"{num_prompt} of the context's {max_context} tokens: at most "
                       f"{max_context - num_prompt} can be generated. Lower max_tokens or "
                       "leave it out (the reply may then run to the context's end).",
                       param="max_tokens", code="context_length_exceeded")


def too_long(e: PromptTooLongError, kind: str) -> ApiError:
    return ApiError(400, str(e), param="messages" if kind == "chat" else "prompt",
                    code="context_length_exceeded")


def key_matches(given: str, key: str) -> bool:
    """Constant-time comparison of the Authorization token with the key; both are hashed
    first, so neither their contents nor the key's length shows in the time taken."""
    a = hashlib.sha256(given.encode("utf-8", "replace")).digest()
    b = hashlib.sha256(key.encode("utf-8", "replace")).digest()
    return hmac.compare_digest(a, b)


def _short(e: Exception) -> str:
    text = str(e)
    return text if len(text) <= 200 else text[:200] + "..."
