"""Draw Tandem's icon with QPainter and write resources/icons/tandem.{png,icns,ico}.

Two chat bubbles side by side on an indigo squircle: two conversations in tandem.
The generated files are committed; rerun after changing the drawing:
    .venv/bin/python packaging/make_icon.py
"""
from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QPointF, QRectF, Qt
from PySide6.QtGui import (
    QBrush,
    QColor,
    QGuiApplication,
    QImage,
    QLinearGradient,
    QPainter,
    QPainterPath,
    QPen,
)

OUT = Path(__file__).resolve().parent.parent / "resources" / "icons"
GRID = 1024.0      # Apple's icon grid: the body is 824 x 824, inset 100, radius ~185
# ICNS element types holding PNG data, by pixel size (16/32 as icp4/icp5, the rest ic07..ic14).
ICNS_TYPES = [(b"icp4", 16), (b"icp5", 32), (b"ic11", 32), (b"ic12", 64), (b"ic07", 128),
              (b"ic13", 256), (b"ic08", 256), (b"ic14", 512), (b"ic09", 512), (b"ic10", 1024)]
ICO_SIZES = [16, 24, 32, 48, 64, 128, 256]


def _bubble(x: float, y: float, w: float, h: float, tail_left: bool) -> QPainterPath:
    path = QPainterPath()
    path.addRoundedRect(QRectF(x, y, w, h), 70, 70)
    tail = QPainterPath()
    bx = x + (90 if tail_left else w - 90)
    tip = QPointF(bx + (-70 if tail_left else 70), y + h + 75)
    tail.moveTo(bx - 45, y + h - 30)
    tail.lineTo(tip)
    tail.lineTo(bx + 55, y + h - 30)
    tail.closeSubpath()
    return path.united(tail)


def _text_lines(p: QPainter, x: float, y: float, widths: list[float], color: QColor) -> None:
    p.setPen(Qt.NoPen)
    p.setBrush(color)
    for i, w in enumerate(widths):
        p.drawRoundedRect(QRectF(x, y + i * 62, w, 30), 15, 15)


def draw(size: int) -> QImage:
    img = QImage(size, size, QImage.Format_ARGB32_Premultiplied)
    img.fill(Qt.transparent)
    p = QPainter(img)
    p.setRenderHint(QPainter.Antialiasing)
    p.scale(size / GRID, size / GRID)
    body = QRectF(100, 100, 824, 824)
    grad = QLinearGradient(body.topLeft(), body.bottomRight())
    grad.setColorAt(0.0, QColor("#5b5cf0"))
    grad.setColorAt(1.0, QColor("#2a1f7a"))
    p.setPen(Qt.NoPen)
    p.setBrush(QBrush(grad))
    p.drawRoundedRect(body, 185, 185)
    # Left conversation: a white bubble; right one: a teal bubble overlapping it.
    p.setBrush(QColor(0, 0, 0, 60))
    p.drawPath(_bubble(190, 262, 380, 330, True).translated(0, 14))
    p.setBrush(QColor("#ffffff"))
    p.drawPath(_bubble(190, 262, 380, 330, True))
    _text_lines(p, 250, 335, [250, 200, 150], QColor("#5b5cf0"))
    p.setBrush(QColor(0, 0, 0, 70))
    p.drawPath(_bubble(454, 432, 380, 330, False).translated(0, 14))
    p.setBrush(QColor("#34d3b4"))
    p.setPen(QPen(QColor("#2a1f7a"), 10))
    p.drawPath(_bubble(454, 432, 380, 330, False))
    _text_lines(p, 514, 505, [250, 170, 210], QColor("#ffffff"))
    p.end()
    return img


def png_bytes(img: QImage) -> bytes:
    data = QByteArray()
    buf = QBuffer(data)
    buf.open(QIODevice.WriteOnly)
    img.save(buf, "PNG")
    return bytes(data)


def icns(pngs: dict[int, bytes]) -> bytes:
    body = b"".join(kind + struct.pack(">I", 8 + len(pngs[px])) + pngs[px]
                    for kind, px in ICNS_TYPES)
    return b"icns" + struct.pack(">I", 8 + len(body)) + body


def ico(pngs: dict[int, bytes]) -> bytes:
    header = struct.pack("<HHH", 0, 1, len(ICO_SIZES))
    offset = 6 + 16 * len(ICO_SIZES)
    entries, blobs = b"", b""
    for px in ICO_SIZES:
        data = pngs[px]
        side = px if px < 256 else 0            # 0 means 256 in an ICO directory entry
        entries += struct.pack("<BBBBHHII", side, side, 0, 0, 1, 32, len(data), offset)
        blobs += data
        offset += len(data)
    return header + entries + blobs


def main() -> int:
    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])  # noqa: F841
    sizes = sorted({px for _, px in ICNS_TYPES} | set(ICO_SIZES))
    pngs = {px: png_bytes(draw(px)) for px in sizes}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "tandem.png").write_bytes(pngs[1024])
    (OUT / "tandem-256.png").write_bytes(pngs[256])
    (OUT / "tandem.icns").write_bytes(icns(pngs))
    (OUT / "tandem.ico").write_bytes(ico(pngs))
    print(f"wrote {', '.join(sorted(p.name for p in OUT.iterdir()))} in {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
