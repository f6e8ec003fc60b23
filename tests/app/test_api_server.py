"""The app's "Serve on localhost": the API runs on the app's qasync loop over the app's
engine, so an API stream and a GUI conversation decode in the same batch."""
from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
import threading
import time

import pytest

pytestmark = pytest.mark.skipif(bool(os.environ.get("TANDEM_FAKE_ENGINE")),
                                reason="the API serves the real engine")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SubmitGate:
    """Holds the engine thread at the first submission until `release` is set, so the
    requests submitted meanwhile enter the engine's same step on any machine."""

    def __init__(self, engine):
        self.release, self.engine = threading.Event(), engine
        engine.add_listener(self.on_event)

    def on_event(self, ev):
        if type(ev).__name__ == "SubmittedEvent":
            self.release.wait(timeout=30)

    def close(self):
        self.release.set()
        self.engine.remove_listener(self.on_event)


def _stream_in_thread(url: str, model: str, out: dict) -> threading.Thread:
    import openai

    def stream():
        client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=60)
        chunks = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "the quick brown fox"}],
            max_tokens=20, temperature=0, stream=True)
        out["text"] = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    thread = threading.Thread(target=stream, daemon=True)
    thread.start()
    return thread


def test_gui_chat_and_api_stream_share_a_batch(make_window, run, wait_until):
    window = make_window(max_tokens=20)
    port = _free_port()
    window.settings = dataclasses.replace(window.settings, serve_api=True, api_port=port)
    assert run(window.apply_server_settings())
    url = f"http://127.0.0.1:{port}/v1"
    assert window.status_panel.api_address.text() == f"API: {url}"
    steps = []
    window.bridge.step.connect(steps.append)
    gate = SubmitGate(window.bridge.engine)
    out: dict = {}
    try:
        thread = _stream_in_thread(url, window.bridge.model_name, out)
        wait_until(lambda: window.api.num_active == 1)    # held at the engine's gate
        session = window.panes.panes()[0].session
        assert session.send("hello world")
        gui_id = session.request_id
        # the panel lists both replies in flight; the engine has admitted neither yet
        window.status_panel._on_timer_timeout()
        (api_id,) = window.api.server.routes.active
        assert window.status_panel.per_conversation.text().splitlines() == [
            f"{session.title}  waiting", f"API request {api_id}  waiting"]
        gate.release.set()
        wait_until(lambda: not thread.is_alive() and not session.busy)
    finally:
        gate.close()
        run(window.api.stop())
    assert out["text"] and session.model.message(session.model.last_row()).content
    shared = [s for s in steps if gui_id in s.decode_request_ids and s.batch_size == 2]
    assert shared, "the API request and the conversation never decoded in one step"
    assert window.status_panel.api_address.text() == "API: off"


def test_taken_port_is_reported_and_setting_off_stops(make_window, run):
    window = make_window(load=False)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        window.settings = dataclasses.replace(window.settings, serve_api=True, api_port=port)
        assert not run(window.apply_server_settings())
    assert "another port" in window.last_error and window.api.address == ""
    window.settings = dataclasses.replace(window.settings, api_port=_free_port())
    assert run(window.apply_server_settings()) and window.api.address
    window.settings = dataclasses.replace(window.settings, serve_api=False)
    assert run(window.apply_server_settings()) and window.api.server is None
    assert window.status_panel.api_address.text() == "API: off"


def _status(url: str) -> int:
    import json
    import urllib.error
    import urllib.request
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        assert "error" in json.loads(e.read())
        return e.code


def test_api_answers_503_while_the_app_loads_a_model(make_window, run, wait_until,
                                                    model_path):
    saw_503 = threading.Event()

    def held(loader):                 # the load waits until a client has been told 503
        def load(**kw):
            saw_503.wait(timeout=30)
            return loader(**kw)
        return load
    window = make_window(load=False, wrap_loader=held)
    window.settings = dataclasses.replace(window.settings, serve_api=True, api_port=_free_port())
    assert run(window.apply_server_settings())
    url, codes, loaded = window.api.address + "/models", [], threading.Event()

    def poll():                       # a client polling while the GUI thread loads
        while not loaded.is_set():
            codes.append(_status(url))
            if codes[-1] == 503:
                saw_503.set()
            time.sleep(0.02)
        codes.append(_status(url))    # once more, after the load
    poller = threading.Thread(target=poll, daemon=True)
    window.bridge.load_started.connect(lambda _path: poller.start())
    try:
        assert run(window.load_model(model_path))
        loaded.set()
        wait_until(lambda: not poller.is_alive())   # the loop must run: it serves the API
    finally:
        run(window.api.stop())
    assert 503 in codes and set(codes) <= {503, 200} and codes[-1] == 200


def test_settings_dialog_round_trips_the_api_toggle_and_port(qtbot):
    from app.storage.app_settings import AppSettings
    from app.windows.settings_dialog import SettingsDialog
    start = AppSettings(serve_api=True, api_port=8123)
    dialog = SettingsDialog(start)
    qtbot.addWidget(dialog)
    assert dialog.settings() == start
    dialog.serve_api.setChecked(False)
    dialog.api_port.setValue(9000)
    out = dialog.settings()
    assert not out.serve_api and out.api_port == 9000
    assert AppSettings.from_dict(out.to_dict()) == out
    assert AppSettings.from_dict({"serve_api": True, "api_port": 0}) == AppSettings()


def _call_in_thread(fn, wait_until):
    """fn() on a worker thread while the Qt loop (which serves the API) keeps running."""
    out: dict = {}
    thread = threading.Thread(target=lambda: out.setdefault("value", fn()), daemon=True)
    thread.start()
    wait_until(lambda: not thread.is_alive())
    return out.get("value")


def test_switching_models_ends_api_streams_with_an_error_then_serves_the_new_one(
        make_window, run, wait_until, endless_model_path):
    import openai
    # The model that never ends a reply, read greedily: the stream is still going when
    # the model switches (a sampled end of text after 1-3 tokens failed this test in two
    # fresh-clone runs of .ci/run, session 8).
    model_path = endless_model_path
    window = make_window(max_tokens=20, model=model_path)
    window.settings = dataclasses.replace(window.settings, serve_api=True, api_port=_free_port())
    assert run(window.apply_server_settings())
    client = openai.OpenAI(base_url=window.api.address, api_key="none", max_retries=0,
                           timeout=60)
    slow = lambda ev: time.sleep(0.005) if type(ev).__name__ == "StepEvent" else None  # noqa: E731
    window.bridge.engine.add_listener(slow)      # the long reply below is still streaming
    outcome: dict = {}

    def stream():
        try:
            for _ in client.completions.create(model=window.bridge.model_name, prompt=[5, 6],
                                               max_tokens=2000, temperature=0.0, stream=True):
                outcome["tokens"] = outcome.get("tokens", 0) + 1
        except openai.APIError as e:
            outcome["error"] = str(e)
    thread = threading.Thread(target=stream, daemon=True)

    async def switch_while_streaming() -> bool:
        # One run of the loop from the first token to the stream's end: in a test the
        # loop runs only inside run(), and a chunk's write resumed by Qt as one run()
        # returned found no running loop (a 500, "Connection error"; seen once in a fresh-clone
        # .ci/run, session 8).
        # The app's loop never stops, so that gap exists only here.
        while outcome.get("tokens", 0) < 2 and thread.is_alive():
            await asyncio.sleep(0.02)
        loaded = await window.load_model(model_path)        # the same model, loaded again
        while thread.is_alive():
            await asyncio.sleep(0.02)
        return loaded
    try:
        thread.start()
        assert run(asyncio.wait_for(switch_while_streaming(), 120))
        assert "engine stopped this request" in outcome.get("error", ""), outcome
        again = _call_in_thread(lambda: client.chat.completions.create(
            model=window.bridge.model_name, messages=[{"role": "user", "content": "hi"}],
            max_tokens=3), wait_until)
    finally:
        run(window.api.stop())
    assert again.usage.completion_tokens >= 1
