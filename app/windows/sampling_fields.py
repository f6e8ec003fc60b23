"""The system prompt and sampling fields shared by the settings dialogs."""
from __future__ import annotations

from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QPlainTextEdit,
    QSpinBox,
)


def spin(low: int, high: int, value: int, step: int = 1) -> QSpinBox:
    box = QSpinBox(minimum=low, maximum=high, singleStep=step)
    box.setValue(value)
    return box


def dspin(low: float, high: float, value: float, step: float) -> QDoubleSpinBox:
    box = QDoubleSpinBox(minimum=low, maximum=high, singleStep=step, decimals=2)
    box.setValue(value)
    return box


class SamplingFields:
    """System prompt, temperature, top-p and max tokens, filled from any object that
    has those attributes (a Conversation, the app settings)."""

    def __init__(self, values, prompt_height: int = 80):
        self.system_prompt = QPlainTextEdit(values.system_prompt)
        self.system_prompt.setFixedHeight(prompt_height)
        self.temperature = dspin(0.0, 2.0, values.temperature, 0.05)
        self.top_p = dspin(0.01, 1.0, values.top_p, 0.01)
        self.max_tokens = spin(1, 131072, values.max_tokens, 64)

    def add_rows(self, form: QFormLayout) -> None:
        form.addRow("System prompt", self.system_prompt)
        form.addRow("Temperature", self.temperature)
        form.addRow("Top-p", self.top_p)
        form.addRow("Max tokens", self.max_tokens)

    def values(self) -> dict:
        return {"system_prompt": self.system_prompt.toPlainText(),
                "temperature": self.temperature.value(), "top_p": self.top_p.value(),
                "max_tokens": self.max_tokens.value()}


def ok_cancel(dialog: QDialog) -> QDialogButtonBox:
    buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok
                               | QDialogButtonBox.StandardButton.Cancel)
    buttons.accepted.connect(dialog.accept)
    buttons.rejected.connect(dialog.reject)
    return buttons
