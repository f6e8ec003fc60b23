"""The status dock: live engine numbers from StepEvents, a few times a second,
with a minute of sparkline history; GPU (or CPU) clock and power from the
telemetry monitor with what they mean and where they came from; the engine's
kernels; trace recording and export."""
from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import (
    QApplication,
    QDockWidget,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app.status.activity import activity_lines, batch_text, merged
from app.status.process_memory import format_bytes, resident_bytes
from app.status.sparkline import Sparkline
from app.status.status_text import (
    cpu_text,
    kernel_text,
    kv_text,
    reading_text,
)
from app.status.step_stats import StepStats

TICK_MS = 250
SPARK_SAMPLES = 60_000 // TICK_MS        # a minute of ticks
_METRICS = [("decode", "Decode tok/s", "#4f6ef7"), ("prefill", "Prefill tok/s", "#10a37f"),
            ("batch", "Batch size", "#f59e0b"), ("kv", "KV pages", "#8b5cf6"),
            ("memory", "Memory (RSS)", "#64748b"), ("mhz", "GPU MHz", "#ef4444"),
            ("watts", "GPU W", "#ec4899")]
_CAPTIONED = ("batch", "kv", "mhz", "watts")
MIN_WIDTH_EM, MAX_WIDTH_EM = 30, 46      # the dock's width, in average characters


def _latest(telemetry):
    """The telemetry source's latest() Reading, or None (no source, or it failed)."""
    if telemetry is None:
        return None
    try:
        return telemetry.latest()
    except Exception:  # noqa: BLE001 - a failing sampler shows n/a
        return None


def _short(title: str, n: int = 26) -> str:
    return title if len(title) <= n else title[:n - 1] + "…"


def _label(text: str, name: str, wrap: bool = False) -> QLabel:
    label = QLabel(text, objectName=name)
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setIndent(0)          # a style-sheet padding would otherwise indent the text
    if wrap:
        # A sentence (the degraded note, a kernel reason) wraps to the panel's width
        # and never asks for more: its width hint would widen the dock and squeeze
        # the chats.
        label.setWordWrap(True)
        label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
    return label


class StatusPanel(QDockWidget):
    """Signals:
        trace_toggled(bool): the user started (True) or stopped recording a trace
        save_trace_requested(): the user asked to save the trace to a file
    """
    trace_toggled = Signal(bool)
    save_trace_requested = Signal()

    def __init__(self, bridge, telemetry=None, activity=lambda: [], parent=None):
        """activity() -> [Activity]: the replies in flight (chats and API requests),
        in the app's words; the panel adds the engine's from the step events."""
        super().__init__("Status", parent)
        self.setObjectName("statusPanel")
        self.stats = StepStats()
        self.telemetry = telemetry
        self._bridge = bridge
        self._activity = activity
        self.values: dict[str, QLabel] = {}
        self.names: dict[str, QLabel] = {}
        self.captions: dict[str, QLabel] = {}
        self.sparklines: dict[str, Sparkline] = {}
        self.per_conversation = _label("idle", "perConversation", wrap=True)
        self.api_address = _label("API: off", "apiAddress", wrap=True)
        self.api_address.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.kernels = _label("kernels: no model", "kernelStatus", wrap=True)
        # BLAS and dense/quantized weights (CPU only)
        self.cpu = _label("", "cpuStatus", wrap=True)
        self.trace_button = QPushButton("● Record trace", objectName="traceButton",
                                        checkable=True)
        self.trace_button.setToolTip("Record engine steps, requests and telemetry "
                                     "as a Perfetto trace")
        self.save_trace_button = QPushButton("Save trace as…", objectName="saveTraceButton")
        self.save_trace_button.setEnabled(False)
        self.trace_button.toggled.connect(self._on_trace_button_toggled)
        self.save_trace_button.clicked.connect(self.save_trace_requested)
        self.setWidget(self._build())
        bridge.step.connect(self._on_bridge_step)
        bridge.model_loaded.connect(self._on_bridge_model_loaded)
        bridge.load_started.connect(self._on_bridge_load_started)
        self._timer = QTimer(self, interval=TICK_MS)
        self._timer.timeout.connect(self._on_timer_timeout)
        self._timer.start()
        self._on_timer_timeout()
        self.fit_to_font()

    def _build(self) -> QWidget:
        body = QWidget(objectName="statusBody")
        grid = QGridLayout()
        grid.setHorizontalSpacing(10)
        grid.setVerticalSpacing(1)
        row = 0
        for key, label, color in _METRICS:
            self.values[key] = _label("—", "metricValue")
            self.values[key].setAlignment(Qt.AlignmentFlag.AlignRight)
            self.sparklines[key] = Sparkline(color, SPARK_SAMPLES)
            self.names[key] = _label(label, "metricName")
            grid.addWidget(self.names[key], row, 0)
            grid.addWidget(self.values[key], row, 1)
            if key in _CAPTIONED:
                row += 1
                self.captions[key] = _label("", "metricCaption", wrap=True)
                grid.addWidget(self.captions[key], row, 0, 1, 2)
            grid.addWidget(self.sparklines[key], row + 1, 0, 1, 2)
            row += 2
        layout = QVBoxLayout(body)
        layout.setContentsMargins(12, 8, 12, 8)
        layout.addLayout(grid)
        layout.addWidget(self.kernels)
        layout.addWidget(self.api_address)
        layout.addWidget(self.cpu)
        layout.addWidget(_label("Replies in flight", "sectionLabel"))
        layout.addWidget(self.per_conversation)
        layout.addStretch(1)
        buttons = QHBoxLayout()
        buttons.setSpacing(6)
        buttons.addWidget(self.trace_button, 1)
        buttons.addWidget(self.save_trace_button, 1)
        layout.addLayout(buttons)
        return body

    def fit_to_font(self) -> None:
        """Width limits in characters of the app's font (call after a font change)."""
        em = max(QFontMetrics(QApplication.font()).averageCharWidth(), 1)
        self.setMinimumWidth(round(MIN_WIDTH_EM * em))
        self.setMaximumWidth(round(MAX_WIDTH_EM * em))

    def natural_width(self) -> int:
        """The width its contents ask for at the current font, within the limits: after
        a font change (19 -> 13) the panel the big font widened comes back to it."""
        return min(max(self.sizeHint().width(), self.minimumWidth()), self.maximumWidth())

    def value_text(self, key: str) -> str:
        return self.values[key].text()

    def name_text(self, key: str) -> str:
        return self.names[key].text()

    def caption_text(self, key: str) -> str:
        return self.captions[key].text()

    def set_trace_state(self, recording: bool, can_save: bool) -> None:
        """Show the recorder's state without emitting trace_toggled."""
        self.trace_button.blockSignals(True)
        self.trace_button.setChecked(recording)
        self.trace_button.blockSignals(False)
        self._label_trace_button(recording)
        self.save_trace_button.setEnabled(can_save)

    def _label_trace_button(self, recording: bool) -> None:
        self.trace_button.setText("■ Stop recording" if recording else "● Record trace")

    def show_api(self, address: str) -> None:
        """The local API's base URL ("" when it is off)."""
        self.api_address.setText(f"API: {address}" if address else "API: off")
        self.api_address.setToolTip("OpenAI-compatible; its requests share the batch "
                                    "with your chats" if address else "")

    def show_kernels(self, status: dict) -> None:
        text = kernel_text(status)
        self.kernels.setText(text.line)
        self.kernels.setToolTip(text.tooltip)
        self.kernels.setProperty("warn", text.warn)
        self.kernels.style().unpolish(self.kernels)
        self.kernels.style().polish(self.kernels)

    def show_cpu(self, blas: dict, weights: dict) -> None:
        text = cpu_text(blas, weights)
        self.cpu.setText(text.line)
        self.cpu.setToolTip(text.tooltip)
        self.cpu.setVisible(bool(text.line))
        self.cpu.setProperty("warn", text.warn)

    # slots
    def _on_bridge_step(self, event) -> None:
        self.stats.add_step(event)

    def _on_bridge_model_loaded(self, _name: str) -> None:
        self.stats = StepStats()       # the previous engine's steps say nothing of this one
        self.show_kernels(self._bridge.kernel_status)
        self.show_cpu(*getattr(self._bridge, "cpu_status", ({}, {})))

    def _on_bridge_load_started(self, _path: str) -> None:
        self.kernels.setText("kernels: loading…")
        self.kernels.setToolTip("")

    def _on_trace_button_toggled(self, checked: bool) -> None:
        self._label_trace_button(checked)
        self.trace_toggled.emit(checked)

    def _on_timer_timeout(self) -> None:
        snap = self.stats.snapshot()
        rss = resident_bytes()
        activities = self.activities()
        # A prefill-only step decodes no rows: while replies stream, show the last
        # decode batch rather than 0.
        batch, batch_value, batch_caption = batch_text(snap.last_decode_batch, activities)
        kv_value, kv_caption = kv_text(*self._kv_pages(snap),
                                       getattr(self._bridge.engine, "kv_page_bytes", 0))
        reading = _latest(self.telemetry)
        text = reading_text(reading)
        shown = {"decode": (f"{snap.decode_tok_s:.1f}", snap.decode_tok_s),
                 "prefill": (f"{snap.prefill_tok_s:.0f}", snap.prefill_tok_s),
                 "batch": (batch_value, batch),
                 "kv": (kv_value, snap.kv_pages_used),
                 "memory": (format_bytes(rss), rss),
                 "mhz": (text.mhz, getattr(reading, "gpu_mhz", None)),
                 "watts": (text.watts, getattr(reading, "gpu_watts", None))}
        for key, (value_text, value) in shown.items():
            self.values[key].setText(value_text)
            self.sparklines[key].append(value)
        self.captions["batch"].setText(batch_caption)
        self.captions["kv"].setText(kv_caption)
        self.names["mhz"].setText(text.mhz_name)
        self.names["watts"].setText(text.watts_name)
        self.captions["mhz"].setText(text.mhz_caption)
        self.captions["watts"].setText(text.watts_caption)
        for key in ("mhz", "watts"):
            for widget in (self.values[key], self.captions[key], self.sparklines[key]):
                widget.setToolTip(text.tooltip)
        self.per_conversation.setText(activity_lines(activities, snap.per_request_tok_s,
                                                     snap.degraded, _short))

    def _kv_pages(self, snap) -> tuple[int, int]:
        """(used, total) pages: the last step's; before the first step of a loaded
        model, its empty pool (the scratch page is not counted, as the steps do)."""
        engine = self._bridge.engine
        if engine is None:
            return 0, 0
        if snap.kv_pages_total:
            return snap.kv_pages_used, snap.kv_pages_total
        return 0, max(int(getattr(engine, "num_pages", 0) or 0) - 1, 0)

    def activities(self) -> list:
        """The replies in flight, each with one phase: the app's word merged with the
        engine's (queued, reading its prompt, streaming)."""
        flight = self._activity()
        self.stats.forget({a.request_id for a in flight})
        return [merged(a, self.stats.phase(a.request_id)) for a in flight]
