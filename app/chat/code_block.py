"""A fenced code block: language label, Copy button, monospace text coloured by
Pygments in the theme's style."""
from __future__ import annotations

from PySide6.QtCore import QEvent, QTimer
from PySide6.QtGui import QFontDatabase, QGuiApplication
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QToolButton, QVBoxLayout

from app.chat.auto_height_browser import AutoHeightBrowser
from app.chat.code_highlighter import CodeHighlighter


class CodeBlock(QFrame):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("codeBlock")
        self._language = QLabel(objectName="codeLanguage")
        self.copy_button = QToolButton(text="Copy", objectName="codeCopy")
        self.copy_button.clicked.connect(self._on_copy_button_clicked)
        header = QHBoxLayout()
        header.setContentsMargins(10, 4, 4, 0)
        header.addWidget(self._language)
        header.addStretch(1)
        header.addWidget(self.copy_button)
        self.text = AutoHeightBrowser()
        self.text.setObjectName("codeText")
        self.text.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.text.set_no_wrap()      # long lines scroll sideways, never break mid-token
        self.highlighter = CodeHighlighter(self.text.document())
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 6)
        layout.setSpacing(0)
        layout.addLayout(header)
        layout.addWidget(self.text)

    def set_code(self, code: str, language: str) -> None:
        self._language.setText(language or "code")
        self.highlighter.set_language(language)
        self.text.set_plain(code)

    def code(self) -> str:
        return self.text.source_text()

    def _on_copy_button_clicked(self) -> None:
        QGuiApplication.clipboard().setText(self.code())
        self.copy_button.setText("Copied")
        QTimer.singleShot(1200, lambda: self.copy_button.setText("Copy"))

    # Qt overrides
    def changeEvent(self, event):
        super().changeEvent(event)
        if event.type() == QEvent.Type.StyleChange:      # the theme changed
            self.highlighter.update_theme()
