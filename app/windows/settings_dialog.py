"""Engine limits and defaults for new conversations."""
from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import (
    QDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
)

from app.storage.app_settings import AppSettings
from app.windows.sampling_fields import SamplingFields, ok_cancel, spin
from engine.cache.disk_cache import clear_folder, folder_usage

AUTOMATIC = "Automatic (sized from free memory)"
OFF = "Off (memory only)"


class SettingsDialog(QDialog):
    def __init__(self, settings: AppSettings, parent=None, cache_dir: Path | None = None):
        """cache_dir: the prompt cache folder whose use is shown (None: not shown)."""
        super().__init__(parent)
        self.cache_dir = cache_dir
        self.setWindowTitle("Settings")
        s = settings
        self.max_num_seqs = spin(1, 256, s.max_num_seqs)
        # 0 shows "Automatic": the engine sizes the KV cache from free memory.
        self.kv_budget_mb = spin(0, 1_048_576, s.kv_budget_mb or 0, 256)
        self.kv_budget_mb.setSpecialValueText(AUTOMATIC)
        self.kv_budget_mb.setSuffix(" MB")
        self.prefill_chunk = spin(16, 65536, s.prefill_chunk, 64)
        # 0 shows "Off": conversations are cached in memory only.
        self.disk_cache_mb = spin(0, 1_048_576, s.disk_cache_mb, 512)
        self.disk_cache_mb.setSpecialValueText(OFF)
        self.disk_cache_mb.setSuffix(" MB")
        self.disk_usage = QLabel(objectName="hint")
        self.clear_button = QPushButton("Clear", clicked=self.clear_disk_cache)
        self.fields = SamplingFields(s.chat)
        engine = QFormLayout()
        engine.addRow("Max concurrent sequences", self.max_num_seqs)
        engine.addRow("KV cache memory", self.kv_budget_mb)
        engine.addRow("Prefill chunk (tokens)", self.prefill_chunk)
        engine.addRow("Prompt cache on disk", self.disk_cache_mb)
        if cache_dir is not None:
            row = QHBoxLayout()
            row.addWidget(self.disk_usage, 1)
            row.addWidget(self.clear_button)
            engine.addRow("", row)
            self.show_disk_usage()
        engine.addRow(QLabel("The KV cache holds the conversations' context: its size in MB "
                             "bounds how many tokens fit at once (Automatic: sized from "
                             "free memory when the model loads). The prompt cache on disk "
                             "lets conversations resume after a restart without reading "
                             "their history again; the oldest entries go when it is full.\n"
                             "Engine limits apply when a model is (re)loaded.",
                             objectName="hint", wordWrap=True))
        defaults = QFormLayout()
        self.fields.add_rows(defaults)
        buttons = ok_cancel(self)
        layout = QVBoxLayout(self)
        for title, form in (("Engine", engine), ("New conversations", defaults)):
            group = QGroupBox(title)
            group.setLayout(form)
            layout.addWidget(group)
        layout.addWidget(buttons)

    def show_disk_usage(self) -> None:
        used = folder_usage(self.cache_dir)
        self.disk_usage.setText(f"{used / (1 << 20):,.1f} MB used in {self.cache_dir}")
        self.clear_button.setEnabled(used > 0)

    def clear_disk_cache(self) -> None:
        """Delete the cached conversations (a loaded model treats them as misses)."""
        clear_folder(self.cache_dir)
        self.show_disk_usage()

    def settings(self) -> AppSettings:
        return AppSettings(max_num_seqs=self.max_num_seqs.value(),
                           kv_budget_mb=self.kv_budget_mb.value() or None,
                           prefill_chunk=self.prefill_chunk.value(),
                           disk_cache_mb=self.disk_cache_mb.value(),
                           chat=self.fields.values())
