"""One conversation's title, system prompt and sampling settings."""
from __future__ import annotations

from PySide6.QtWidgets import QDialog, QFormLayout, QLineEdit

from app.storage.conversation import Conversation
from app.windows.sampling_fields import SamplingFields, ok_cancel


class ConversationSettingsDialog(QDialog):
    def __init__(self, conversation: Conversation, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Conversation settings")
        self._conversation = conversation
        self.title = QLineEdit(conversation.title)
        self.fields = SamplingFields(conversation.settings, prompt_height=100)
        form = QFormLayout(self)
        form.addRow("Title", self.title)
        self.fields.add_rows(form)
        form.addRow(ok_cancel(self))

    def conversation(self) -> Conversation:
        return self._conversation.copy(
            title=self.title.text().strip() or self._conversation.title,
            settings=self.fields.values())
