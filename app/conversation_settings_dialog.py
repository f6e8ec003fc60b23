"""One conversation's title, system prompt and sampling settings."""
from __future__ import annotations

from PySide6.QtWidgets import QDialog, QDialogButtonBox, QFormLayout, QLineEdit, QPlainTextEdit

from app.conversation import Conversation
from app.settings_dialog import dspin, spin


class ConversationSettingsDialog(QDialog):
    def __init__(self, conversation: Conversation, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Conversation settings")
        self._conversation = conversation
        c = conversation
        self.title = QLineEdit(c.title)
        self.system_prompt = QPlainTextEdit(c.system_prompt)
        self.system_prompt.setFixedHeight(100)
        self.temperature = dspin(0.0, 2.0, c.temperature, 0.05)
        self.top_p = dspin(0.01, 1.0, c.top_p, 0.01)
        self.max_tokens = spin(1, 131072, c.max_tokens, 64)
        form = QFormLayout(self)
        form.addRow("Title", self.title)
        form.addRow("System prompt", self.system_prompt)
        form.addRow("Temperature", self.temperature)
        form.addRow("Top-p", self.top_p)
        form.addRow("Max tokens", self.max_tokens)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok
                                   | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)

    def conversation(self) -> Conversation:
        return self._conversation.copy(
            title=self.title.text().strip() or self._conversation.title,
            system_prompt=self.system_prompt.toPlainText(),
            temperature=self.temperature.value(), top_p=self.top_p.value(),
            max_tokens=self.max_tokens.value())
