"""Settings: appearance, engine limits (the prompt cache on disk included), defaults
for new conversations, the local API and the hosts file for several machines."""
from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
)

from app.storage.app_settings import (
    FONT_SIZES,
    MAX_STREAM_TOK_S,
    MIN_KV_BUDGET_MB,
    THEME_CHOICES,
    AppSettings,
    max_kv_budget_mb,
)
from app.windows.hosts_group import HostsGroup
from app.windows.sampling_fields import SamplingFields, ok_cancel, spin
from engine.cache.disk_cache import clear_folder, folder_usage

AUTOMATIC = "Automatic (what the model can use)"
OFF = "Off (memory only)"
PACE_OFF = "Off (new prompts are read at full speed)"
PACE_TIP = ("Keep other chats streaming at least this many tokens per second while a new "
            "prompt is read. A higher floor keeps their streams smooth, but a new chat's "
            "first token comes later; 0 (Off): read new prompts as fast as possible.")


class SettingsDialog(QDialog):
    def __init__(self, settings: AppSettings, parent=None, cache_dir: Path | None = None,
                 model_path: str | None = None, hosts: HostsGroup | None = None):
        """cache_dir: the prompt cache folder whose use is shown (None: not shown);
        model_path: the loaded model (in the several-machines command); hosts: the
        hosts file's rows (tests give one with their own check)."""
        super().__init__(parent)
        self.hosts = hosts or HostsGroup(settings.hosts_file, model_path)
        self.hosts.setParent(self)
        self.cache_dir = cache_dir
        self.setWindowTitle("Settings")
        self._start = settings
        s = settings
        self.fields = SamplingFields(s.chat)
        defaults = QFormLayout()
        self.fields.add_rows(defaults)
        # Two columns: in one, the dialog was taller than 2/3 of a 1080p screen (the
        # most Qt gives a new window), and the layout squeezed the wrapped hints.
        columns = QHBoxLayout()
        for groups in ((("Appearance", self._looks_form(s)), ("Engine", self._engine_form(s)),
                        ("Several machines", self.hosts.form())),
                       (("New conversations", defaults), ("Local API", self._api_form(s)))):
            column = QVBoxLayout()
            for title, form in groups:
                group = QGroupBox(title)
                group.setLayout(form)
                column.addWidget(group)
            column.addStretch(1)
            columns.addLayout(column, 1)
        layout = QVBoxLayout(self)
        layout.addLayout(columns)
        layout.addWidget(ok_cancel(self))

    def _looks_form(self, s: AppSettings) -> QFormLayout:
        self.theme = QComboBox()
        for choice in THEME_CHOICES:
            self.theme.addItem(choice.title(), choice)
        self.theme.setCurrentIndex(THEME_CHOICES.index(s.theme))
        self.theme.setToolTip("System follows your computer's light or dark setting")
        self.font_size = spin(FONT_SIZES.start, FONT_SIZES.stop - 1, s.font_size)
        self.font_size.setSuffix(" px")
        form = QFormLayout()
        form.addRow("Theme", self.theme)
        form.addRow("Font size", self.font_size)
        return form

    def _engine_form(self, s: AppSettings) -> QFormLayout:
        self.max_num_seqs = spin(1, 256, s.max_num_seqs)
        # 0 shows "Automatic": the engine sizes the KV cache from what the model can use
        # and the machine's memory; never more than the machine has.
        self.kv_budget_mb = spin(0, max_kv_budget_mb(), s.kv_budget_mb or 0, 256)
        self.kv_budget_mb.setToolTip(f"At most this machine's {max_kv_budget_mb():,} MB")
        self.kv_budget_mb.setSpecialValueText(AUTOMATIC)
        self.kv_budget_mb.setSuffix(" MB")
        # 1..63 MB would hold a few pages: a value typed there becomes the minimum.
        self.kv_budget_mb.setKeyboardTracking(False)
        self.kv_budget_mb.valueChanged.connect(self._snap_kv_budget)
        self.prefill_chunk = spin(16, 65536, s.prefill_chunk, 64)
        form = QFormLayout()
        form.addRow("Max concurrent sequences", self.max_num_seqs)
        form.addRow("KV cache memory", self.kv_budget_mb)
        form.addRow("Prefill chunk (tokens)", self.prefill_chunk)
        self._add_disk_cache_rows(form, s)
        self._add_pace_row(form, s)
        form.addRow(QLabel("The KV cache holds the conversations' context: its size in MB "
                           "bounds how many tokens fit at once (Automatic: what every "
                           "chat at full context can use, within a sixteenth of this "
                           "machine's memory). The prompt cache on disk "
                           "lets conversations resume after a restart without reading "
                           "their history again; the oldest entries go when it is full. "
                           "While a new prompt is read, the chats already streaming keep at "
                           "least the pace set here: higher keeps them smooth, lower starts "
                           "the new chat sooner.\n"
                           "Engine limits apply when a model is (re)loaded; the streaming "
                           "pace applies at once.",
                           objectName="hint", wordWrap=True))
        return form

    def _add_disk_cache_rows(self, form: QFormLayout, s: AppSettings) -> None:
        # 0 shows "Off": conversations are cached in memory only.
        self.disk_cache_mb = spin(0, 1_048_576, s.disk_cache_mb, 512)
        self.disk_cache_mb.setSpecialValueText(OFF)
        self.disk_cache_mb.setSuffix(" MB")
        self.disk_usage = QLabel(objectName="hint")
        self.clear_button = QPushButton("Clear", clicked=self.clear_disk_cache)
        form.addRow("Prompt cache on disk", self.disk_cache_mb)
        if self.cache_dir is not None:
            row = QHBoxLayout()
            row.addWidget(self.disk_usage, 1)
            row.addWidget(self.clear_button)
            form.addRow("", row)
            self.show_disk_usage()

    def _add_pace_row(self, form: QFormLayout, s: AppSettings) -> None:
        # Whole tokens/s: a reading pace needs no fractions (0 shows "Off").
        self.min_stream_tok_s = spin(0, MAX_STREAM_TOK_S, round(s.min_stream_tok_s))
        self.min_stream_tok_s.setPrefix("at least ")
        self.min_stream_tok_s.setSuffix(" tokens/s")
        self.min_stream_tok_s.setSpecialValueText(PACE_OFF)
        self.min_stream_tok_s.setToolTip(PACE_TIP)
        label = QLabel("Keep other chats streaming", toolTip=PACE_TIP)
        form.addRow(label, self.min_stream_tok_s)

    def _pace(self) -> float:
        """The field's pace; a stored fraction the field rounds is kept unless changed."""
        pace, start = self.min_stream_tok_s.value(), self._start.min_stream_tok_s
        return start if pace == round(start) else float(pace)

    def _snap_kv_budget(self, value: int) -> None:
        if 0 < value < MIN_KV_BUDGET_MB:
            self.kv_budget_mb.setValue(MIN_KV_BUDGET_MB)

    def _api_form(self, s: AppSettings) -> QFormLayout:
        self.serve_api = QCheckBox("Serve on localhost", objectName="serveApi")
        self.serve_api.setChecked(s.serve_api)
        self.api_port = spin(1, 65535, s.api_port)
        self.api_port.setObjectName("apiPort")
        self.api_cors_origin = QLineEdit(s.api_cors_origin, objectName="apiCorsOrigin")
        self.api_cors_origin.setPlaceholderText("off")
        self.api_cors_origin.setToolTip(
            "A web page at this origin (a browser front-end such as Open WebUI) may call "
            "the API; * lets any page on this computer's browser call it.")
        self.api_error = QLabel(objectName="apiError", wordWrap=True)
        self.api_error.hide()
        form = QFormLayout()
        form.addRow(self.serve_api)
        form.addRow("Port", self.api_port)
        form.addRow("Browser origin", self.api_cors_origin)
        form.addRow(self.api_error)
        form.addRow(QLabel("An OpenAI-compatible API at http://127.0.0.1:PORT/v1 for editors, "
                           "agents and scripts; its requests decode in the same batch as "
                           "your chats. A web page can call it only from the browser origin "
                           "set above (e.g. http://localhost:3000; * for any).",
                           objectName="hint", wordWrap=True))
        return form

    def accept(self) -> None:
        """OK keeps the dialog open, saying why, while a field cannot be kept."""
        try:
            self.settings()
        except ValueError as e:
            self.api_error.setText(str(e))
            self.api_error.show()
            self.api_cors_origin.setFocus()
            return
        super().accept()

    def show_disk_usage(self) -> None:
        used = folder_usage(self.cache_dir)
        self.disk_usage.setText(f"{used / (1 << 20):,.1f} MB used in {self.cache_dir}")
        self.clear_button.setEnabled(used > 0)

    def clear_disk_cache(self) -> None:
        """Delete the cached conversations (a loaded model treats them as misses)."""
        clear_folder(self.cache_dir)
        self.show_disk_usage()

    def settings(self) -> AppSettings:
        kv = self.kv_budget_mb.value()
        return AppSettings(max_num_seqs=self.max_num_seqs.value(),
                           kv_budget_mb=max(kv, MIN_KV_BUDGET_MB) if kv else None,
                           prefill_chunk=self.prefill_chunk.value(),
                           disk_cache_mb=self.disk_cache_mb.value(),
                           min_stream_tok_s=self._pace(),
                           serve_api=self.serve_api.isChecked(),
                           api_port=self.api_port.value(),
                           api_cors_origin=self.api_cors_origin.text().strip(),
                           hosts_file=self.hosts.value(),
                           theme=self.theme.currentData(), font_size=self.font_size.value(),
                           chat=self.fields.values())
