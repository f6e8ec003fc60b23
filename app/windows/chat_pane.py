"""A pane bound to one conversation: header, streaming chat, its own composer."""
from __future__ import annotations

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.chat.chat_view import READING_WIDTH, ChatView
from app.chat.composer import Composer
from app.controllers.chat_session import ChatSession
from app.windows.context_meter import ContextMeter
from app.windows.pane_menu import pane_menu_button
from engine.settings_spec import settings_summary


class ChatPane(QFrame):
    """Signals:
        close_requested(): the pane's close button
        settings_requested(): the pane's conversation settings button
        activated(): the user clicked or typed in this pane
        export_requested(str): "markdown" or "json", from the pane's menu
    """
    close_requested = Signal()
    settings_requested = Signal()
    activated = Signal()
    export_requested = Signal(str)

    def __init__(self, session: ChatSession, parent=None):
        super().__init__(parent)
        self.setObjectName("chatPane")
        self.session = session
        self.title = QLabel(objectName="paneTitle")
        self.subtitle = QLabel(objectName="paneSubtitle")
        for label in (self.title, self.subtitle):     # elided, never widen the pane
            label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.settings_button = QToolButton(text="⚙", objectName="paneButton",
                                           toolTip="Conversation settings")
        # Shown while the conversation's replies are constrained to its JSON schema.
        self.schema_badge = QToolButton(text="{ } JSON", objectName="schemaBadge")
        self.menu_button = pane_menu_button(self)
        self.close_button = QToolButton(text="✕", objectName="paneButton", toolTip="Close pane")
        self.context = ContextMeter()
        self.view = ChatView()
        self.view.set_model(session.model)
        self.composer = Composer("Message…")
        self.composer.setToolTip("Enter sends, Shift+Enter starts a new line")
        self.send_button = QPushButton("Send", objectName="sendButton")
        # Escape stops this pane's reply while focus is anywhere in the pane.
        self.stop_shortcut = QShortcut(QKeySequence(Qt.Key.Key_Escape), self)
        self.stop_shortcut.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        self._lay_out()
        self._connect()
        self._on_session_conversation_changed()
        self._on_session_busy_changed(session.busy)

    def _lay_out(self) -> None:
        # Two rows: the title beside the buttons, the settings summary beside the context
        # meter. With three panes side by side a pane is ~250 px wide: on one row with
        # the meter the title kept ~50 px ("Write…"), on its own row ~130.
        header = QGridLayout()
        header.setContentsMargins(14, 8, 8, 8)
        header.setHorizontalSpacing(6)
        header.setVerticalSpacing(0)
        buttons = QHBoxLayout()
        buttons.setSpacing(0)
        for button in (self.schema_badge, self.settings_button, self.menu_button,
                       self.close_button):
            buttons.addWidget(button)
        header.addWidget(self.title, 0, 0)
        header.addLayout(buttons, 0, 1)
        header.addWidget(self.subtitle, 1, 0)
        header.addWidget(self.context, 1, 1, Qt.AlignmentFlag.AlignRight)
        header.setColumnStretch(0, 1)
        composer_row = QWidget(objectName="composerRow")
        composer_row.setMaximumWidth(READING_WIDTH)     # lined up with the messages
        row = QHBoxLayout(composer_row)
        row.setContentsMargins(10, 6, 10, 10)
        row.addWidget(self.composer, 1)
        row.addWidget(self.send_button, 0, Qt.AlignmentFlag.AlignBottom)
        bottom = QHBoxLayout()
        bottom.setContentsMargins(0, 0, 0, 0)
        bottom.addWidget(composer_row)
        head = QFrame(objectName="paneHeader")
        head.setLayout(header)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(head)
        layout.addWidget(self.view, 1)
        layout.addLayout(bottom)

    def _connect(self) -> None:
        s = self.session
        self.close_button.clicked.connect(self.close_requested)
        self.settings_button.clicked.connect(self.settings_requested)
        self.schema_badge.clicked.connect(self.settings_requested)
        self.composer.submitted.connect(self._on_composer_submitted)
        self.composer.installEventFilter(self)
        self.send_button.clicked.connect(self._on_send_button_clicked)
        self.stop_shortcut.activated.connect(s.stop)
        s.waiting_changed.connect(self.view.set_waiting_text)
        self.view.stop_requested.connect(lambda _row: s.stop())
        self.view.regenerate_requested.connect(s.regenerate)
        self.view.edit_submitted.connect(s.edit_and_resend)
        self.view.version_requested.connect(s.select_version)
        self.view.continue_requested.connect(s.continue_reply)
        s.busy_changed.connect(self._on_session_busy_changed)
        for signal in (s.model.dataChanged, s.model.rowsInserted, s.model.rowsRemoved,
                       s.max_context_changed):
            signal.connect(self._show_context)
        s.conversation_changed.connect(self._on_session_conversation_changed)

    def set_active(self, active: bool) -> None:
        self.setProperty("active", active)
        self.style().unpolish(self)
        self.style().polish(self)

    # slots
    def _on_composer_submitted(self, text: str) -> None:
        self.session.send(text)

    def _on_send_button_clicked(self) -> None:
        if self.session.busy:
            self.session.stop()
        else:
            self.composer.submit()

    def _show_context(self, *_args) -> None:
        self.context.set_usage(self.session.context_tokens, self.session.max_context)

    def _on_session_busy_changed(self, busy: bool) -> None:
        self._show_context()
        self.send_button.setText("Stop" if busy else "Send")
        self.send_button.setProperty("busy", "true" if busy else "false")
        self.send_button.style().unpolish(self.send_button)
        self.send_button.style().polish(self.send_button)

    def _on_session_conversation_changed(self) -> None:
        c = self.session.conversation
        self.title.setToolTip(c.title)
        self.schema_badge.setVisible(bool(c.json_schema))
        self.schema_badge.setToolTip(
            "Every reply follows this conversation's JSON schema (click to change it):\n"
            + _shortened(c.json_schema))
        self._elide()

    def _elide(self) -> None:
        c = self.session.conversation
        subtitle = settings_summary(c.settings)
        for label, text in ((self.title, c.title), (self.subtitle, subtitle)):
            label.setText(label.fontMetrics().elidedText(text, Qt.TextElideMode.ElideRight,
                                                         max(label.width(), 40)))

    # Qt overrides
    def resizeEvent(self, event):
        super().resizeEvent(event)
        self._elide()

    def eventFilter(self, watched, event):
        if event.type() == QEvent.Type.FocusIn:
            self.activated.emit()
        return False

    def mousePressEvent(self, event):
        self.activated.emit()
        super().mousePressEvent(event)


def _shortened(text: str, limit: int = 400) -> str:
    return text if len(text) <= limit else text[:limit] + "…"
