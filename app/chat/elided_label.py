"""A one-line label that elides what does not fit and shows all of it in its tooltip
(a message's footer in a narrow pane: one line, never four to six)."""
from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QLabel, QSizePolicy, QStyle, QStyleOption


class ElidedLabel(QLabel):
    def __init__(self, text: str = "", parent=None, **kwargs):
        super().__init__(text, parent, **kwargs)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.setWordWrap(False)

    def setText(self, text: str) -> None:
        super().setText(text)
        self._update_tooltip()

    def shown_text(self) -> str:
        """What is drawn: the text, elided at the right to the label's width."""
        rect = self.contentsRect()
        return self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight,
                                             rect.width())

    def is_elided(self) -> bool:
        return self.shown_text() != self.text()

    def _update_tooltip(self) -> None:
        self.setToolTip(self.text() if self.is_elided() else "")

    # Qt overrides
    def minimumSizeHint(self) -> QSize:
        return QSize(0, super().minimumSizeHint().height())

    def resizeEvent(self, event):
        super().resizeEvent(event)
        self._update_tooltip()

    def paintEvent(self, _event):
        painter = QPainter(self)
        option = QStyleOption()
        option.initFrom(self)
        self.style().drawPrimitive(QStyle.PrimitiveElement.PE_Widget, option, painter, self)
        painter.setPen(self.palette().color(self.foregroundRole()))
        painter.drawText(self.contentsRect(), int(self.alignment()), self.shown_text())
