"""How much of the model's context a conversation fills: "1.2k / 8.2k" in its pane's
header, the exact numbers in the tooltip, highlighted when nearly full."""
from __future__ import annotations

from PySide6.QtWidgets import QLabel

NEARLY_FULL = 0.8          # of max_context: the next turns may not fit


def compact(n: int) -> str:
    return str(n) if n < 1000 else f"{n / 1000:.1f}k"


class ContextMeter(QLabel):
    def __init__(self, parent=None):
        super().__init__(parent, objectName="contextMeter")
        self.used: int | None = None
        self.total: int | None = None
        self.set_usage(None, None)

    def set_usage(self, used: int | None, total: int | None) -> None:
        """Tokens the conversation fills of `total` (max_context); None: not known."""
        self.used, self.total = used, total
        if not total:
            self.setText("")
            self.setToolTip("")
            return
        shown = used or 0
        self.setText(f"{compact(shown)} / {compact(total)}")
        self.setToolTip(f"Context: {shown:,} of {total:,} tokens used ({shown / total:.0%}): "
                        "the conversation so far and the reply. A reply stops when the "
                        "context is full; start a new chat then.")
        warn = shown >= NEARLY_FULL * total
        if self.property("warn") != warn:
            self.setProperty("warn", warn)
            self.style().unpolish(self)
            self.style().polish(self)
