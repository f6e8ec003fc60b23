"""A small line chart of the last minute of one metric (custom paint)."""
from __future__ import annotations

from collections import deque

from PySide6.QtCore import QPointF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPainterPath, QPalette, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

HEADROOM = 1.25


class Sparkline(QWidget):
    def __init__(self, color: str = "#4f6ef7", num_samples: int = 240, parent=None):
        super().__init__(parent)
        self.color = QColor(color)
        self.values: deque[float | None] = deque(maxlen=num_samples)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setFixedHeight(28)

    def append(self, value: float | None) -> None:
        """None (no reading) leaves a gap rather than drawing a false zero."""
        self.values.append(None if value is None else float(value))
        self.update()

    def sizeHint(self) -> QSize:
        return QSize(160, 28)

    def _runs(self) -> list[list[QPointF]]:
        """Points of each stretch without gaps, oldest first."""
        n, cap = len(self.values), self.values.maxlen
        known = [v for v in self.values if v is not None]
        # Headroom, so a steady value (a clock) reads as a line, not a filled slab.
        top = max(max(known, default=0.0) * HEADROOM, 1e-9)
        w, h = self.width() - 2, self.height() - 4
        runs: list[list[QPointF]] = [[]]
        for i, v in enumerate(self.values):
            if v is None:
                if runs[-1]:
                    runs.append([])
                continue
            runs[-1].append(QPointF(1 + w * (cap - n + i) / max(cap - 1, 1),
                                    2 + h * (1 - v / top)))
        return [run for run in runs if len(run) >= 2]

    # Qt overrides
    def paintEvent(self, _event):
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.fillRect(self.rect(), self.palette().color(QPalette.ColorRole.AlternateBase))
        fill = QColor(self.color)
        fill.setAlpha(40)
        painter.setPen(QPen(self.color, 1.5, Qt.PenStyle.SolidLine, Qt.PenCapStyle.RoundCap))
        for points in self._runs():
            area = QPainterPath(QPointF(points[0].x(), self.height()))
            for p in points:
                area.lineTo(p)
            area.lineTo(QPointF(points[-1].x(), self.height()))
            painter.fillPath(area, fill)
            line = QPainterPath(points[0])
            for p in points[1:]:
                line.lineTo(p)
            painter.drawPath(line)
