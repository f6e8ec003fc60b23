"""Paints a sidebar row: title, last message snippet, age and a pin if pinned."""
from __future__ import annotations

import time

from PySide6.QtCore import QPointF, QRect, QSize, Qt
from PySide6.QtGui import QFont, QPalette, QPen
from PySide6.QtWidgets import QStyle, QStyledItemDelegate

from app.controllers.conversation_list_model import ConversationListModel
from app.style import theme_color


def age_text(t: float, now: float | None = None) -> str:
    seconds = max(0.0, (now or time.time()) - t)
    if seconds < 60:
        return "now"
    for size, unit in ((604800, "w"), (86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return ""


class ConversationDelegate(QStyledItemDelegate):
    def sizeHint(self, option, index) -> QSize:
        return QSize(option.rect.width(), 2 * option.fontMetrics.height() + 18)

    def paint(self, painter, option, index) -> None:
        conv = index.data(ConversationListModel.ConversationRole)
        selected = option.state & QStyle.StateFlag.State_Selected
        hovered = option.state & QStyle.StateFlag.State_MouseOver
        painter.save()
        painter.setRenderHint(painter.RenderHint.Antialiasing)
        rect = option.rect.adjusted(6, 2, -6, -2)
        if selected or hovered:
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(theme_color("list-selected" if selected else "list-hover"))
            painter.drawRoundedRect(rect, 8, 8)
        text = rect.adjusted(10, 6, -10, -6)
        line = option.fontMetrics.height()
        title_font = QFont(option.font)
        title_font.setWeight(QFont.Weight.DemiBold)
        painter.setFont(option.font)
        painter.setPen(theme_color("subtle"))
        age = age_text(conv.updated_at)
        age_w = option.fontMetrics.horizontalAdvance(age) + 4
        painter.drawText(QRect(text.right() - age_w, text.top(), age_w, line),
                         Qt.AlignmentFlag.AlignRight, age)
        if conv.pinned:           # a small pin left of the age
            age_w += _draw_pin(painter, text.right() - age_w - 4, text.top() + line // 2)
        indent = 0
        if index.data(ConversationListModel.OpenRole):     # shown in a pane: a dot
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(theme_color("accent"))   # the active pane's accent
            painter.drawEllipse(text.left(), text.top() + line // 2 - 3, 7, 7)
            indent = 13
        painter.setFont(title_font)
        painter.setPen(option.palette.color(QPalette.ColorRole.Text))
        title_rect = QRect(text.left() + indent, text.top(),
                           text.width() - age_w - 6 - indent, line)
        painter.drawText(title_rect, Qt.AlignmentFlag.AlignLeft,
                         painter.fontMetrics().elidedText(conv.title, Qt.TextElideMode.ElideRight,
                                                          title_rect.width()))
        painter.setFont(option.font)
        painter.setPen(theme_color("muted"))
        snippet_rect = QRect(text.left(), text.top() + line + 2, text.width(), line)
        painter.drawText(snippet_rect, Qt.AlignmentFlag.AlignLeft,
                         option.fontMetrics.elidedText(conv.snippet or "No messages yet",
                                                       Qt.TextElideMode.ElideRight,
                                                       snippet_rect.width()))
        painter.restore()


def _draw_pin(painter, right: int, middle: int) -> int:
    """A pin (round head, short needle) ending at `right`; returns the width it took."""
    painter.save()
    painter.setPen(Qt.PenStyle.NoPen)
    painter.setBrush(theme_color("accent"))
    painter.drawEllipse(right - 7, middle - 6, 7, 7)
    pen = QPen(theme_color("accent"))
    pen.setWidthF(1.5)
    painter.setPen(pen)
    painter.drawLine(QPointF(right - 3.5, middle), QPointF(right - 3.5, middle + 5))
    painter.restore()
    return 12
