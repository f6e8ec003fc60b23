"""Engine limits and defaults for new conversations."""
from __future__ import annotations

from PySide6.QtWidgets import QCheckBox, QDialog, QFormLayout, QGroupBox, QLabel, QVBoxLayout

from app.storage.app_settings import AppSettings
from app.windows.sampling_fields import SamplingFields, ok_cancel, spin


class SettingsDialog(QDialog):
    def __init__(self, settings: AppSettings, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Settings")
        s = settings
        self.max_num_seqs = spin(1, 256, s.max_num_seqs)
        self.num_pages = spin(2, 1_000_000, s.num_pages, 256)
        self.prefill_chunk = spin(16, 65536, s.prefill_chunk, 64)
        self.fields = SamplingFields(s)
        engine = QFormLayout()
        engine.addRow("Max concurrent sequences", self.max_num_seqs)
        engine.addRow("KV budget (pages)", self.num_pages)
        engine.addRow("Prefill chunk (tokens)", self.prefill_chunk)
        engine.addRow(QLabel("Engine limits apply when a model is (re)loaded.",
                             objectName="hint"))
        defaults = QFormLayout()
        self.fields.add_rows(defaults)
        api = self._api_form(s)
        buttons = ok_cancel(self)
        layout = QVBoxLayout(self)
        for title, form in (("Engine", engine), ("New conversations", defaults),
                            ("Local API", api)):
            group = QGroupBox(title)
            group.setLayout(form)
            layout.addWidget(group)
        layout.addWidget(buttons)

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
        return AppSettings(max_num_seqs=self.max_num_seqs.value(),
                           num_pages=self.num_pages.value(),
                           prefill_chunk=self.prefill_chunk.value(),
                           serve_api=self.serve_api.isChecked(),
                           api_port=self.api_port.value(),
                           **self.fields.values())
