"""Settings > Local API > Browser origin: a browser front-end's origin the app's API
answers (CORS), checked before it is kept, applied to the running server."""
from __future__ import annotations

import dataclasses
import os
import socket
import threading
import urllib.request

import pytest

from app.storage.app_settings import AppSettings
from app.windows.settings_dialog import SettingsDialog

ORIGIN = "http://localhost:3000"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_origin_round_trips_and_is_kept_as_a_browser_sends_it(qtbot):
    start = AppSettings(serve_api=True, api_cors_origin=ORIGIN + "/")
    assert start.api_cors_origin == ORIGIN                   # no trailing slash
    dialog = SettingsDialog(start)
    qtbot.addWidget(dialog)
    assert dialog.settings() == start
    dialog.api_cors_origin.setText("  *  ")
    out = dialog.settings()
    assert out.api_cors_origin == "*" and AppSettings.from_dict(out.to_dict()) == out
    assert AppSettings.from_dict({"api_cors_origin": "not an origin"}).api_cors_origin == ""


@pytest.mark.parametrize("bad", ["localhost:3000", "http://host/path", "ftp://h",
                                 "http://h:port", "http://"])
def test_a_bad_origin_keeps_the_dialog_open_and_says_why(qtbot, bad):
    dialog = SettingsDialog(AppSettings())
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.api_cors_origin.setText(bad)
    dialog.accept()
    assert dialog.isVisible() and not dialog.result()
    assert "origin" in dialog.api_error.text() or "port" in dialog.api_error.text()
    dialog.api_cors_origin.setText("")
    dialog.accept()
    assert not dialog.isVisible() and dialog.result()


def _preflight(url: str, origin: str) -> dict:
    req = urllib.request.Request(url, method="OPTIONS", headers={
        "Origin": origin, "Access-Control-Request-Method": "POST"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return {"status": r.status, **dict(r.headers)}
    except urllib.error.HTTPError as e:
        return {"status": e.code, **dict(e.headers)}


@pytest.mark.skipif(bool(os.environ.get("TANDEM_FAKE_ENGINE")),
                    reason="the API serves the real engine")
def test_the_running_api_answers_the_allowed_origin_only(make_window, run, wait_until):
    window = make_window(load=False)
    port = _free_port()
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    answers: list[dict] = []

    def ask(origin):     # from a worker thread: the Qt loop serves the API meanwhile
        thread = threading.Thread(target=lambda: answers.append(_preflight(url, origin)))
        thread.start()
        wait_until(lambda: not thread.is_alive())
        return answers[-1]
    try:
        window.settings = dataclasses.replace(window.settings, serve_api=True, api_port=port)
        assert run(window.apply_server_settings())
        assert ask(ORIGIN)["status"] == 405                  # off by default: no CORS
        window.settings = dataclasses.replace(window.settings, api_cors_origin=ORIGIN)
        assert run(window.apply_server_settings())           # restarted with the origin
        allowed = ask(ORIGIN)
        assert allowed["status"] == 204
        assert allowed["Access-Control-Allow-Origin"] == ORIGIN
        assert ask("http://evil.example")["status"] == 405
    finally:
        run(window.api.stop())
