"""The status dock: live engine numbers from StepEvents, a few times a second,
with a minute of sparkline history; GPU readings from an optional telemetry
source ("n/a" without one) and a trace-recording toggle."""
from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QDockWidget, QGridLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.process_memory import format_bytes, resident_bytes
from app.sparkline import Sparkline
from app.step_stats import StepStats

TICK_MS = 250
_METRICS = [("decode", "Decode tok/s", "#4f6ef7"), ("prefill", "Prefill tok/s", "#10a37f"),
            ("batch", "Batch size", "#f59e0b"), ("kv", "KV pages", "#8b5cf6"),
            ("memory", "Memory (RSS)", "#64748b"), ("mhz", "GPU MHz", "#ef4444"),
            ("watts", "GPU W", "#ec4899")]


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


class StatusPanel(QDockWidget):
    """Signals:
        trace_toggled(bool): the user started (True) or stopped recording a trace
    """
    trace_toggled = Signal(bool)

    def __init__(self, bridge, title_of=lambda rid: f"#{rid}", telemetry=None,
                 can_trace: bool = False, parent=None):
        super().__init__("Status", parent)
        self.setObjectName("statusPanel")
        self.stats = StepStats()
        self.telemetry = telemetry
        self._title_of = title_of
        self.values: dict[str, QLabel] = {}
        self.sparklines: dict[str, Sparkline] = {}
        self.per_conversation = QLabel(objectName="perConversation")
        self.per_conversation.setTextFormat(Qt.TextFormat.PlainText)
        self.source = QLabel(objectName="statusFootnote")
        self.trace_button = QPushButton("● Record trace", objectName="traceButton", checkable=True)
        self.trace_button.setEnabled(can_trace)
        self.trace_button.setToolTip("" if can_trace else "n/a: trace recorder not available")
        self.trace_button.toggled.connect(self._on_trace_button_toggled)
        self.setWidget(self._build())
        bridge.step.connect(self._on_bridge_step)
        self._timer = QTimer(self, interval=TICK_MS)
        self._timer.timeout.connect(self._on_timer_timeout)
        self._timer.start()
        self._on_timer_timeout()

    def _build(self) -> QWidget:
        body = QWidget(objectName="statusBody")
        grid = QGridLayout()
        grid.setHorizontalSpacing(10)
        grid.setVerticalSpacing(2)
        for row, (key, label, color) in enumerate(_METRICS):
            name = QLabel(label, objectName="metricName")
            self.values[key] = QLabel("—", objectName="metricValue")
            self.values[key].setAlignment(Qt.AlignmentFlag.AlignRight)
            self.sparklines[key] = Sparkline(color)
            grid.addWidget(name, 2 * row, 0)
            grid.addWidget(self.values[key], 2 * row, 1)
            grid.addWidget(self.sparklines[key], 2 * row + 1, 0, 1, 2)
        layout = QVBoxLayout(body)
        layout.setContentsMargins(12, 8, 12, 8)
        layout.addLayout(grid)
        layout.addWidget(QLabel("Streaming conversations", objectName="sectionLabel"))
        layout.addWidget(self.per_conversation)
        layout.addStretch(1)
        layout.addWidget(self.source)
        layout.addWidget(self.trace_button)
        return body

    def value_text(self, key: str) -> str:
        return self.values[key].text()

    # slots
    def _on_bridge_step(self, event) -> None:
        self.stats.add_step(event)

    def _on_trace_button_toggled(self, checked: bool) -> None:
        self.trace_button.setText("■ Stop and save trace" if checked else "● Record trace")
        self.trace_toggled.emit(checked)

    def _on_timer_timeout(self) -> None:
        snap = self.stats.snapshot()
        rss = resident_bytes()
        reading = _latest(self.telemetry)
        mhz = getattr(reading, "gpu_mhz", None)
        watts = getattr(reading, "gpu_watts", None)
        shown = {"decode": (f"{snap.decode_tok_s:.1f}", snap.decode_tok_s),
                 "prefill": (f"{snap.prefill_tok_s:.0f}", snap.prefill_tok_s),
                 "batch": (f"{snap.batch_size}  (max {snap.max_batch_size})", snap.batch_size),
                 "kv": (f"{snap.kv_pages_used} / {snap.kv_pages_total}", snap.kv_pages_used),
                 "memory": (format_bytes(rss), rss or 0),
                 "mhz": ("n/a" if mhz is None else f"{mhz:.0f}", mhz),
                 "watts": ("n/a" if watts is None else f"{watts:.1f}", watts)}
        for key, (text, value) in shown.items():
            self.values[key].setText(text)
            self.sparklines[key].append(value)
        lines = [f"{_short(self._title_of(rid))}  {rate:.1f} tok/s"
                 for rid, rate in sorted(snap.per_request_tok_s.items())]
        self.per_conversation.setText("\n".join(lines) or "idle")
        self._show_source(reading)

    def _show_source(self, reading) -> None:
        if reading is None:
            self.source.setText("GPU telemetry: n/a")
            return
        self.source.setText(f"{reading.mhz_label} from {reading.source}")
        self.source.setToolTip(reading.tooltip)
        for key in ("mhz", "watts"):
            self.values[key].setToolTip(reading.tooltip)
