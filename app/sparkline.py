"""A small line chart of the last minute of one metric (custom paint)."""
from __future__ import annotations

from collections import deque

from PySide6.QtCore import QPointF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPainterPath, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget


class Sparkline(QWidget):
    def __init__(self, color: str = "#4f6ef7", num_samples: int = 240, parent=None):
        super().__init__(parent)
        self.color = QColor(color)
        self.values: deque[float] = deque(maxlen=num_samples)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setFixedHeight(28)

    def append(self, value: float | None) -> None:
        self.values.append(float(value or 0.0))
        self.update()

    def sizeHint(self) -> QSize:
        return QSize(160, 28)

    def _points(self) -> list[QPointF]:
        n, cap = len(self.values), self.values.maxlen
        top = max(max(self.values, default=0.0), 1e-9)
        w, h = self.width() - 2, self.height() - 4
        return [QPointF(1 + w * (cap - n + i) / max(cap - 1, 1), 2 + h * (1 - v / top))
                for i, v in enumerate(self.values)]

    # Qt overrides
    def paintEvent(self, _event):
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.fillRect(self.rect(), QColor("#f6f7f9"))
        points = self._points()
        if len(points) < 2:
            return
        area = QPainterPath(QPointF(points[0].x(), self.height()))
        for p in points:
            area.lineTo(p)
        area.lineTo(QPointF(points[-1].x(), self.height()))
        fill = QColor(self.color)
        fill.setAlpha(40)
        painter.fillPath(area, fill)
        line = QPainterPath(points[0])
        for p in points[1:]:
            line.lineTo(p)
        painter.setPen(QPen(self.color, 1.5, Qt.PenStyle.SolidLine, Qt.PenCapStyle.RoundCap))
        painter.drawPath(line)
