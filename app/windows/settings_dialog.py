"""Engine limits and defaults for new conversations."""
from __future__ import annotations

from PySide6.QtWidgets import QComboBox, QDialog, QFormLayout, QGroupBox, QLabel, QVBoxLayout

from app.storage.app_settings import FONT_SIZES, THEME_CHOICES, AppSettings
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
        buttons = ok_cancel(self)
        layout = QVBoxLayout(self)
        for title, form in (("Appearance", looks), ("Engine", engine),
                            ("New conversations", defaults)):
            group = QGroupBox(title)
            group.setLayout(form)
            layout.addWidget(group)
        layout.addWidget(buttons)

    def settings(self) -> AppSettings:
        return AppSettings(max_num_seqs=self.max_num_seqs.value(),
                           kv_budget_mb=self.kv_budget_mb.value() or None,
                           prefill_chunk=self.prefill_chunk.value(),
                           theme=self.theme.currentData(), font_size=self.font_size.value(),
                           chat=self.fields.values())
