"""The status panel: what the clock and power numbers mean, the kernels line,
and the batch size while conversations stream."""
from __future__ import annotations

import time

import pytest
from fixed_sampler import fixed_monitor

from app.controllers.bridge import EngineBridge
from app.status.activity import (
    DEGRADED_NOTE,
    QUEUED,
    READING,
    STREAMING,
    WAITING_FOR_MODEL,
    Activity,
    activity_lines,
    batch_text,
    merged,
)
from app.status.status_panel import StatusPanel
from app.status.status_text import cpu_text, kernel_text
from engine.events import StepEvent


def test_clock_and_power_show_their_meaning_and_source(make_window, qtbot):
    monitor = fixed_monitor(mhz=1398.0, watts=12.5)
    reading = monitor.sample_once()
    panel = make_window(load=False, telemetry=monitor).status_panel
    qtbot.waitUntil(lambda: panel.value_text("mhz") == "1398 MHz")
    assert panel.caption_text("mhz") == "SM clock MHz · NVML"
    assert panel.value_text("watts") == "12.5 W"
    assert panel.caption_text("watts") == "GPU W · NVML"
    assert panel.values["mhz"].toolTip() == reading.tooltip
    assert panel.sparklines["mhz"].values[-1] == 1398.0


def test_cpu_fallback_shows_a_real_clock(make_window, qtbot):
    from engine.telemetry import TelemetryMonitor, make_sampler
    sampler = make_sampler("cpu")
    if sampler.source == "none":
        pytest.skip(f"no CPU clock on this machine: {sampler.read().reason}")
    monitor = TelemetryMonitor(interval_s=0.5, sampler=sampler)
    monitor.sample_once()
    panel = make_window(load=False, telemetry=monitor).status_panel
    qtbot.waitUntil(lambda: panel.value_text("mhz").endswith(" MHz"))
    assert panel.caption_text("mhz") == f"CPU MHz · {sampler.source}"
    assert panel.value_text("watts") == "n/a" and "power" in panel.caption_text("watts")


def test_kernel_line_after_load_lists_each_kernel(make_window):
    window = make_window()
    status = window.bridge.kernel_status
    line = window.status_panel.kernels
    assert line.text() == kernel_text(status).line and line.text().startswith("kernels:")
    for name in status:
        assert name in line.toolTip()


def test_cpu_line_after_load_says_blas_and_weights(make_window):
    window = make_window()
    blas, weights = window.bridge.cpu_status
    line = window.status_panel.cpu
    assert blas["name"] and weights["mode"]           # the engine reports both
    assert line.text() == cpu_text(blas, weights).line
    if weights["reason"].startswith("GPU"):           # a GPU backend: nothing to say
        assert line.text() == "" and line.isHidden()
        return
    assert line.text().startswith("CPU: ") and blas["name"] in line.text()
    assert weights["reason"] in line.toolTip()


def test_cpu_text():
    mkl = {"name": "Intel MKL 2026.2", "path": "/v/lib/libmkl_rt.so.3", "reason": ""}
    dense = {"mode": "dense", "reason": "CPU backend, dense float32 0.54 GB <= 0.25 x RAM"}
    text = cpu_text(mkl, dense)
    assert text.line == "CPU: dense float32 weights · Intel MKL 2026.2" and not text.warn
    assert "0.25 x RAM" in text.tooltip and "/v/lib/libmkl_rt.so.3" in text.tooltip
    gpu = {"mode": "as loaded", "reason": "GPU backend: quantized weights run fast there"}
    assert cpu_text(mkl, gpu).line == ""
    broken = {**mkl, "reason": "loaded but the self-check failed: max error 3"}
    assert cpu_text(broken, dense).warn


def test_kernel_disabled_by_self_test_is_highlighted(make_window):
    panel = make_window(load=False).status_panel
    panel.show_kernels({"a": "cuda", "b": "cuda", "c": "cuda", "d": "cuda"})
    assert panel.kernels.text() == "kernels: 4 on (cuda)" and not panel.kernels.property("warn")
    panel.show_kernels({"a": "cuda", "b": "reference (self-test error 3.1e-01 > 1e-03)"})
    assert panel.kernels.text() == "kernels: 1 on (cuda), 1 disabled by self-test"
    assert panel.kernels.property("warn") is True
    assert "b: reference (self-test error" in panel.kernels.toolTip()


def test_kernel_text_without_gpu_backend():
    status = {n: "reference (no GPU backend)" for n in ("a", "b")}
    assert kernel_text(status).line == "kernels: reference (no GPU backend)"


def test_prefill_only_step_does_not_zero_the_batch_while_streaming(qtbot):
    bridge = EngineBridge()
    flight = [Activity(i, f"chat {i}", STREAMING) for i in (1, 2, 3)]
    flight.append(Activity(4, "chat 4", READING))
    panel = StatusPanel(bridge, activity=lambda: flight)
    qtbot.addWidget(panel)
    now = time.perf_counter()
    bridge.step.emit(StepEvent(1, now, now, "decode", (1, 2, 3), batch_size=3))
    bridge.step.emit(StepEvent(2, now, now, "prefill", (), prefill_request_ids=(4,),
                               prefill_tokens=256, batch_size=0))
    qtbot.waitUntil(lambda: panel.stats.num_steps == 2 and panel.value_text("batch") == "3")
    assert panel.caption_text("batch") == "decode batch · 3 streaming · 1 reading prompt"
    assert panel.per_conversation.text().splitlines()[-1] == "chat 4  reading prompt"


def test_one_phase_per_reply_from_the_app_and_the_engine():
    loading = Activity(None, "a", WAITING_FOR_MODEL)
    sent = Activity(7, "b", READING)            # the app knows it was sent, no more
    tokens = Activity(8, "c", STREAMING)        # its tokens already reached the window
    assert merged(loading, "waiting") == loading
    assert merged(sent, "waiting").phase == QUEUED
    assert merged(sent, "reading").phase == READING
    assert merged(sent, "streaming").phase == STREAMING
    assert merged(tokens, "waiting").phase == STREAMING
    flight = [merged(sent, "waiting"), loading, tokens]
    assert batch_text(4, flight) == (1, "1", "decode batch · 1 streaming · 1 waiting · "
                                             "1 waiting for the model")
    assert activity_lines(flight, {8: 12.34}).splitlines() == [
        "b  waiting", "a  waiting for the model", "c  12.3 tok/s"]
    assert activity_lines([], {}, degraded=True) == DEGRADED_NOTE
    assert activity_lines([], {}) == "idle"
    with pytest.raises(ValueError):
        Activity(1, "d", "thinking")


def test_kv_pages_show_the_pool_once_loaded_before_any_request(make_window, qtbot):
    """Issue 22 item 7: a loaded, idle model shows its pool, not "— no model"."""
    window = make_window()
    panel = window.status_panel
    total = window.bridge.engine.num_pages - 1          # the scratch page is not shown
    qtbot.waitUntil(lambda: panel.value_text("kv") == f"0 / {total} pages")
    assert panel.caption_text("kv") != "no model"
    assert panel.caption_text("kv").endswith("MB KV cache")
