"""Trace recording for the window: one TraceRecorder fed by every engine the
bridge loads and by the telemetry monitor; start/stop and "Save trace as…"."""
from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog

from app.dialog_folders import TRACE
from engine.telemetry.recording import TraceRecording

FILE_FILTER = "Chrome / Perfetto trace (*.json)"


def traces_dir(folder: Path) -> Path:
    """Where recorded traces go: <data folder>/traces."""
    return Path(folder) / "traces"


def default_trace_path(folder: Path) -> Path:
    return traces_dir(folder) / time.strftime("tandem-trace-%Y%m%d-%H%M%S.json")


class TraceController(QObject):
    """Signals:
        state_changed(bool, bool): recording, a trace exists to save
        message(str): a line for the status bar (where a trace went, or why not)
    """
    state_changed = Signal(bool, bool)
    message = Signal(str)

    def __init__(self, bridge, folder: Path, telemetry=None, recorder=None,
                 path: str | Path | None = None, parent=None):
        super().__init__(parent)
        self.folder = Path(folder)
        # The bridge re-attaches its engine listeners to every engine it loads; the
        # telemetry monitor is the status panel's, shared and left running.
        self._recording = TraceRecording(bridge.add_engine_listener, telemetry, recorder)
        self.recorder = self._recording.recorder
        self._next_path = Path(path).expanduser() if path else None   # --trace PATH
        self._has_trace = False
        self.last_path: Path | None = None

    @property
    def is_recording(self) -> bool:
        return self.recorder.is_recording

    @property
    def can_save(self) -> bool:
        return self._has_trace

    def start(self) -> bool:
        if self.is_recording:
            return True
        path = self._next_path or default_trace_path(self.folder)
        self._next_path = None
        try:
            self._recording.start(path)
        except OSError as exc:
            self.message.emit(f"Could not record a trace to {path}: {exc}")
            self.state_changed.emit(False, self._has_trace)
            return False
        self._has_trace = True
        self.last_path = path
        self.message.emit(f"Recording a trace to {path}")
        self.state_changed.emit(True, True)
        return True

    def stop(self) -> Path | None:
        if not self.is_recording:
            return None
        try:
            path = self._recording.stop()
        except OSError as exc:
            self.message.emit(f"Could not save the trace: {exc}; use Save trace as…")
            path = None
        if path is not None:
            self.message.emit(f"Trace saved to {path} (open it in ui.perfetto.dev)")
        self.state_changed.emit(False, self._has_trace)
        return path

    def set_recording(self, recording: bool) -> None:
        if recording:
            self.start()
        else:
            self.stop()

    def save_as(self, path: str | Path) -> Path | None:
        """Export the recording (in progress or stopped) to `path`."""
        path = Path(path)
        if path.suffix.lower() != ".json":
            path = path.with_name(path.name + ".json")
        try:
            saved = self._recording.save(path)
        except (OSError, ValueError) as exc:
            self.message.emit(f"Could not save the trace to {path}: {exc}")
            return None
        self.message.emit(f"Trace saved to {saved} (open it in ui.perfetto.dev)")
        return saved

    def choose_and_save(self, parent=None, folders=None) -> Path | None:
        """Ask where (QFileDialog), then save_as; None if cancelled. folders: a
        DialogFolders (app/dialog_folders.py): the dialog starts in its own last
        folder, else Documents; without one, in the data folder's traces."""
        if not self._has_trace:
            self.message.emit("Nothing to save yet: record a trace first.")
            return None
        name = default_trace_path(self.folder)
        start = str(folders.start_file(TRACE, name.name) if folders else name)
        path, _filter = QFileDialog.getSaveFileName(parent, "Save trace as", start, FILE_FILTER)
        saved = self.save_as(path) if path else None
        if saved is not None and folders is not None:
            folders.remember(TRACE, saved)
        return saved

    def close(self) -> None:
        """Finish a recording in progress (the window is closing)."""
        self.stop()
        self._recording.finish()     # detaches from the shared monitor (not stopped)
