"""One conversation's title, system prompt, sampling settings and JSON schema."""
from __future__ import annotations

from PySide6.QtWidgets import QDialog, QFormLayout, QLabel, QLineEdit, QPlainTextEdit

from app.storage.conversation import Conversation
from app.windows.sampling_fields import SamplingFields, ok_cancel

SCHEMA_HINT = ("Paste a JSON schema to make every reply in this conversation follow it "
               "(decoding is constrained, as the API's response_format json_schema is). "
               "Empty: replies are free text.")


class ConversationSettingsDialog(QDialog):
    def __init__(self, conversation: Conversation, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Conversation settings")
        self._conversation = conversation
        self.title = QLineEdit(conversation.title)
        self.fields = SamplingFields(conversation.settings, prompt_height=100)
        self.schema = QPlainTextEdit(conversation.json_schema, objectName="schemaEditor")
        self.schema.setPlaceholderText('{"type": "object", "properties": {...}}')
        self.schema.setToolTip(SCHEMA_HINT)
        self.schema.setFixedHeight(120)
        self.schema_error = QLabel(objectName="schemaError", wordWrap=True)
        self.schema_error.hide()
        form = QFormLayout(self)
        form.addRow("Title", self.title)
        self.fields.add_rows(form)
        form.addRow("JSON schema", self.schema)
        form.addRow("", self.schema_error)
        form.addRow(ok_cancel(self))

    def schema_text(self) -> str:
        return self.schema.toPlainText().strip()

    def conversation(self) -> Conversation:
        return self._conversation.copy(
            title=self.title.text().strip() or self._conversation.title,
            settings=self.fields.values(), json_schema=self.schema_text())

    # Qt overrides
    def accept(self):
        """Kept only if the schema can constrain a reply; else it says why and stays open."""
        error = schema_error(self.schema_text())
        self.schema_error.setText(error)
        self.schema_error.setVisible(bool(error))
        if not error:
            super().accept()


def schema_error(text: str) -> str:
    """Why `text` cannot be a conversation's JSON schema ("" if it can, or is empty)."""
    if not text:
        return ""
    from engine.server.grammar import schema_from_text
    try:
        schema_from_text(text)
    except ValueError as e:
        return str(e)
    return ""
