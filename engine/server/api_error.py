"""Errors the HTTP API answers with, in OpenAI's error JSON shape."""
from __future__ import annotations


class ApiError(Exception):
    """One failed request: an HTTP status and OpenAI's {"error": {...}} body.

    Raised anywhere while a request is handled; the server's middleware turns it
    into the response, so a client never sees a traceback.
    """

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 code: str | None = None, kind: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.kind = kind or _default_kind(status)

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind,
                          "param": self.param, "code": self.code}}


def _default_kind(status: int) -> str:
    if status == 401:
        return "authentication_error"
    if status == 404:
        return "not_found_error"
    if status >= 500:
        return "server_error"
    return "invalid_request_error"


def bad_request(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param=param)
