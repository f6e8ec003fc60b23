"""The conversation-settings fields shared by the settings dialogs, one widget per
setting of engine/settings_spec.py (built by iterating it, so a new setting
appears here without code)."""
from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QPlainTextEdit,
    QSpinBox,
    QWidget,
)

from engine.settings_spec import SETTINGS, Setting

QT_INT_MAX = 2 ** 31 - 1       # QSpinBox holds a C int
UNSET = -1                     # an optional int's spin box shows "Random" here


def spin(low: int, high: int, value: int, step: int = 1) -> QSpinBox:
    box = QSpinBox(minimum=low, maximum=high, singleStep=step)
    box.setValue(value)
    return box


def dspin(low: float, high: float, value: float, step: float) -> QDoubleSpinBox:
    box = QDoubleSpinBox(minimum=low, maximum=high, singleStep=step, decimals=2)
    box.setValue(value)
    return box


class SamplingFields:
    """One widget per setting, filled from a settings mapping (a Conversation's
    `settings`, the app settings' `chat`); `values()` gives the mapping back."""

    def __init__(self, values: dict[str, Any], prompt_height: int = 80):
        self.widgets: dict[str, QWidget] = {}
        for s in SETTINGS:
            widget = _make_widget(s, values.get(s.name, s.chat_default), prompt_height)
            widget.setToolTip(s.help[:1].upper() + s.help[1:] + ".")
            self.widgets[s.name] = widget

    def add_rows(self, form: QFormLayout) -> None:
        for s in SETTINGS:
            form.addRow(s.label, self.widgets[s.name])

    def values(self) -> dict[str, Any]:
        return {s.name: _read(s, self.widgets[s.name]) for s in SETTINGS}


def _make_widget(s: Setting, value: Any, prompt_height: int) -> QWidget:
    if s.type is str:
        box = QPlainTextEdit(value)
        box.setFixedHeight(prompt_height)
        return box
    high = s.high if s.high is not None else s.ui_high
    if s.type is float:
        low = s.low + s.step if s.low_open else s.low          # (0, x]: the first step
        high = high - s.step if s.high_open else high
        return dspin(low, high, value, s.step)
    low = UNSET if s.optional else int(s.low) + (1 if s.low_open else 0)
    high = min(int(high) - (1 if s.high_open else 0), QT_INT_MAX)
    box = spin(low, high, UNSET if value is None else min(value, high), int(s.step))
    if s.optional:
        box.setSpecialValueText("Random")
    return box


def _read(s: Setting, widget: QWidget) -> Any:
    if s.type is str:
        return widget.toPlainText()
    value = widget.value()
    return None if s.optional and value == UNSET else value


def ok_cancel(dialog: QDialog) -> QDialogButtonBox:
    buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok
                               | QDialogButtonBox.StandardButton.Cancel)
    buttons.accepted.connect(dialog.accept)
    buttons.rejected.connect(dialog.reject)
    return buttons
