"""Engine limits and defaults for new conversations."""
from __future__ import annotations

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QFormLayout,
    QGroupBox,
    QLabel,
    QVBoxLayout,
)

from app.storage.app_settings import FONT_SIZES, MIN_KV_BUDGET_MB, THEME_CHOICES, AppSettings
from app.windows.sampling_fields import SamplingFields, ok_cancel, spin

AUTOMATIC = "Automatic (sized from free memory)"


class SettingsDialog(QDialog):
    def __init__(self, settings: AppSettings, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Settings")
        s = settings
        self.max_num_seqs = spin(1, 256, s.max_num_seqs)
        # 0 shows "Automatic": the engine sizes the KV cache from free memory.
        self.kv_budget_mb = spin(0, 1_048_576, s.kv_budget_mb or 0, 256)
        self.kv_budget_mb.setSpecialValueText(AUTOMATIC)
        self.kv_budget_mb.setSuffix(" MB")
        # 1..63 MB would hold a few pages: a value typed there becomes the minimum.
        self.kv_budget_mb.setKeyboardTracking(False)
        self.kv_budget_mb.valueChanged.connect(self._snap_kv_budget)
        self.prefill_chunk = spin(16, 65536, s.prefill_chunk, 64)
        self.fields = SamplingFields(s.chat)
        self.theme = QComboBox()
        for choice in THEME_CHOICES:
            self.theme.addItem(choice.title(), choice)
        self.theme.setCurrentIndex(THEME_CHOICES.index(s.theme))
        self.theme.setToolTip("System follows your computer's light or dark setting")
        self.font_size = spin(FONT_SIZES.start, FONT_SIZES.stop - 1, s.font_size)
        self.font_size.setSuffix(" px")
        looks = QFormLayout()
        looks.addRow("Theme", self.theme)
        looks.addRow("Font size", self.font_size)
        engine = QFormLayout()
        engine.addRow("Max concurrent sequences", self.max_num_seqs)
        engine.addRow("KV cache memory", self.kv_budget_mb)
        engine.addRow("Prefill chunk (tokens)", self.prefill_chunk)
        engine.addRow(QLabel("The KV cache holds the conversations' context: its size in MB "
                             "bounds how many tokens fit at once (Automatic: sized from "
                             "free memory when the model loads).\n"
                             "Engine limits apply when a model is (re)loaded.",
                             objectName="hint", wordWrap=True))
        defaults = QFormLayout()
        self.fields.add_rows(defaults)
        api = self._api_form(s)
        buttons = ok_cancel(self)
        layout = QVBoxLayout(self)
        for title, form in (("Appearance", looks), ("Engine", engine),
                            ("New conversations", defaults), ("Local API", api)):
            group = QGroupBox(title)
            group.setLayout(form)
            layout.addWidget(group)
        layout.addWidget(buttons)

    def _snap_kv_budget(self, value: int) -> None:
        if 0 < value < MIN_KV_BUDGET_MB:
            self.kv_budget_mb.setValue(MIN_KV_BUDGET_MB)

    def _api_form(self, s: AppSettings) -> QFormLayout:
        self.serve_api = QCheckBox("Serve on localhost", objectName="serveApi")
        self.serve_api.setChecked(s.serve_api)
        self.api_port = spin(1, 65535, s.api_port)
        self.api_port.setObjectName("apiPort")
        form = QFormLayout()
        form.addRow(self.serve_api)
        form.addRow("Port", self.api_port)
        form.addRow(QLabel("An OpenAI-compatible API at http://127.0.0.1:PORT/v1 for editors, "
                           "agents and scripts; its requests decode in the same batch as "
                           "your chats.", objectName="hint", wordWrap=True))
        return form

    def settings(self) -> AppSettings:
        kv = self.kv_budget_mb.value()
        return AppSettings(max_num_seqs=self.max_num_seqs.value(),
                           kv_budget_mb=max(kv, MIN_KV_BUDGET_MB) if kv else None,
                           prefill_chunk=self.prefill_chunk.value(),
                           serve_api=self.serve_api.isChecked(),
                           api_port=self.api_port.value(),
                           theme=self.theme.currentData(), font_size=self.font_size.value(),
                           chat=self.fields.values())
