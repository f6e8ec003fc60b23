"""Engine limits and defaults for new conversations."""
from __future__ import annotations

from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QLabel,
    QPlainTextEdit,
    QSpinBox,
    QVBoxLayout,
)

from app.app_settings import AppSettings


def spin(low: int, high: int, value: int, step: int = 1) -> QSpinBox:
    box = QSpinBox(minimum=low, maximum=high, singleStep=step)
    box.setValue(value)
    return box


def dspin(low: float, high: float, value: float, step: float) -> QDoubleSpinBox:
    box = QDoubleSpinBox(minimum=low, maximum=high, singleStep=step, decimals=2)
    box.setValue(value)
    return box


class SettingsDialog(QDialog):
    def __init__(self, settings: AppSettings, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Settings")
        s = settings
        self.max_num_seqs = spin(1, 256, s.max_num_seqs)
        self.num_pages = spin(2, 1_000_000, s.num_pages, 256)
        self.prefill_chunk = spin(16, 65536, s.prefill_chunk, 64)
        self.system_prompt = QPlainTextEdit(s.system_prompt)
        self.system_prompt.setFixedHeight(80)
        self.temperature = dspin(0.0, 2.0, s.temperature, 0.05)
        self.top_p = dspin(0.01, 1.0, s.top_p, 0.01)
        self.max_tokens = spin(1, 131072, s.max_tokens, 64)
        engine = QFormLayout()
        engine.addRow("Max concurrent sequences", self.max_num_seqs)
        engine.addRow("KV budget (pages)", self.num_pages)
        engine.addRow("Prefill chunk (tokens)", self.prefill_chunk)
        engine.addRow(QLabel("Engine limits apply when a model is (re)loaded.",
                             objectName="hint"))
        defaults = QFormLayout()
        defaults.addRow("System prompt", self.system_prompt)
        defaults.addRow("Temperature", self.temperature)
        defaults.addRow("Top-p", self.top_p)
        defaults.addRow("Max tokens", self.max_tokens)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok
                                   | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        for title, form in (("Engine", engine), ("New conversations", defaults)):
            group = QGroupBox(title)
            group.setLayout(form)
            layout.addWidget(group)
        layout.addWidget(buttons)

    def settings(self) -> AppSettings:
        return AppSettings(max_num_seqs=self.max_num_seqs.value(),
                           num_pages=self.num_pages.value(),
                           prefill_chunk=self.prefill_chunk.value(),
                           system_prompt=self.system_prompt.toPlainText(),
                           temperature=self.temperature.value(), top_p=self.top_p.value(),
                           max_tokens=self.max_tokens.value())
