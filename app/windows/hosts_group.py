"""Settings' "Several machines" rows: the mlx.launch hosts file, a check that each host
answers, and what the user runs to use it (the window itself runs on this machine)."""
from __future__ import annotations

import shlex
import threading
from collections.abc import Callable

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
)

from engine.distributed.hosts_file import HostCheck, HostsFile, HostsFileError, check_hosts

NO_FILE = "None (this machine only)"
USE_HINT = ("This window runs its model on this machine only. To run one model over "
            "the machines of an mlx.launch hosts file (docs/DISTRIBUTED.md), run in "
            "Tandem's folder here: {command}  (every machine: passwordless ssh from this "
            "one, the same Python, Tandem and model paths; it serves the API on port 8000)")


def _check_file(path: str) -> list[HostCheck] | str:
    """The per-host checks, or what is wrong with the file itself."""
    try:
        return check_hosts(HostsFile.read(path))
    except HostsFileError as e:
        return str(e)


class HostsGroup(QObject):
    """Signals:
        checkStarted(): the check of the chosen file began (the button is off until done)
        checked(object): its result: a list of HostCheck, or the file's error (str)
    """

    checkStarted = Signal()
    checked = Signal(object)

    def __init__(self, hosts_file: str, model_path: str | None,
                 check: Callable[[str], list[HostCheck] | str] = _check_file, parent=None):
        """check(path) runs on a worker thread (it waits on the network)."""
        super().__init__(parent)
        self._check, self._model_path = check, model_path
        self.path = QLineEdit(hosts_file, objectName="hostsFile", placeholderText=NO_FILE)
        self.choose_button = QPushButton("Choose…", clicked=self._on_choose_clicked)
        self.check_button = QPushButton("Check hosts", objectName="checkHosts",
                                        clicked=self._on_check_clicked)
        self.result = QLabel(objectName="hostsResult", wordWrap=True, visible=False)
        self.command = QLabel(objectName="hint", wordWrap=True)
        self.command.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self._asked = ""                # the path of the check in flight
        self.path.textChanged.connect(self._on_path_textChanged)
        self.checked.connect(self._on_self_checked)
        self._on_path_textChanged(hosts_file)

    def form(self) -> QFormLayout:
        row = QHBoxLayout()
        row.addWidget(self.path, 1)
        row.addWidget(self.choose_button)
        row.addWidget(self.check_button)
        form = QFormLayout()
        form.addRow("Hosts file", row)
        form.addRow(self.result)
        form.addRow(self.command)
        return form

    def value(self) -> str:
        return self.path.text().strip()

    def command_line(self) -> str:
        model = self._model_path or "MODEL_FOLDER"
        return shlex.join(["python", "-m", "engine", "serve", "--model", model,
                           "--hosts", self.value() or "hosts.json"])

    def _on_choose_clicked(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.path, "Hosts file", self.value(),
                                              "JSON (*.json)")
        if path:
            self.path.setText(path)

    def _on_check_clicked(self) -> None:
        path = self.value()
        if not path:
            return
        self._asked = path
        self.check_button.setEnabled(False)
        self._show(f"Asking each host in {path}…")
        self.checkStarted.emit()
        threading.Thread(target=self._run_check, args=(path,), name="tandem-hosts-check",
                         daemon=True).start()

    def _run_check(self, path: str) -> None:      # the worker thread
        outcome = self._check(path)
        try:
            self.checked.emit(outcome)        # queued to the GUI thread
        except RuntimeError:                  # the dialog closed meanwhile
            pass

    def _checking(self) -> bool:
        return bool(self._asked) and not self.check_button.isEnabled()

    def _on_self_checked(self, outcome) -> None:
        self._asked, asked = "", self._asked
        self.check_button.setEnabled(bool(self.value()))
        if self.value() != asked:             # another file was chosen meanwhile
            return
        if isinstance(outcome, str):
            return self._show(outcome)
        failed = sum(not c.ok for c in outcome)
        head = (f"All {len(outcome)} hosts answer." if not failed
                else f"{failed} of {len(outcome)} hosts failed:")
        self._show("\n".join([head] + [c.line() for c in outcome]))

    def _show(self, text: str) -> None:
        """The check's state (hidden while there is none: the group stays short)."""
        self.result.setText(text)
        self.result.setVisible(bool(text))

    def _on_path_textChanged(self, text: str) -> None:
        self.check_button.setEnabled(bool(text.strip()) and not self._checking())
        self.command.setText(USE_HINT.format(command=self.command_line()))
        self._show("")
