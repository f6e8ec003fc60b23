"""Side-by-side ChatPanes in a splitter: 1-4 panes, more if the window is
wide enough; one pane is active (where the sidebar opens conversations)."""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QLabel, QSplitter, QStackedWidget

from app.windows.chat_pane import ChatPane

MIN_PANE_WIDTH = 320
DEFAULT_MAX_PANES = 4


class PaneArea(QStackedWidget):
    """Signals:
        panes_changed(): a pane was added, removed or rebound
        pane_close_requested(object): the ChatPane whose close button was pressed
        pane_settings_requested(object): the ChatPane whose settings button was pressed
        pane_export_requested(object, str): a ChatPane and "markdown" or "json"
        active_changed(object): the active ChatPane, or None when no pane is left
    """
    panes_changed = Signal()
    active_changed = Signal(object)
    pane_close_requested = Signal(object)
    pane_settings_requested = Signal(object)
    pane_export_requested = Signal(object, str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.splitter = QSplitter(Qt.Orientation.Horizontal, objectName="paneSplitter")
        self.splitter.setChildrenCollapsible(False)
        self.splitter.setHandleWidth(1)
        empty = QLabel("Start a new chat or pick one from the sidebar.", objectName="emptyHint")
        empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.addWidget(empty)
        self.addWidget(self.splitter)
        self.active: ChatPane | None = None

    @property
    def max_panes(self) -> int:
        return max(DEFAULT_MAX_PANES, self.width() // MIN_PANE_WIDTH)

    def panes(self) -> list[ChatPane]:
        return [self.splitter.widget(i) for i in range(self.splitter.count())]

    def can_add(self) -> bool:
        return len(self.panes()) < self.max_panes

    def pane_for(self, conv_id: int) -> ChatPane | None:
        return next((p for p in self.panes() if p.session.conversation.id == conv_id), None)

    def add_pane(self, session) -> ChatPane:
        pane = ChatPane(session)
        pane.setMinimumWidth(260)
        pane.close_requested.connect(lambda: self.pane_close_requested.emit(pane))
        pane.settings_requested.connect(lambda: self.pane_settings_requested.emit(pane))
        pane.activated.connect(lambda: self.set_active(pane))
        pane.export_requested.connect(lambda fmt: self.pane_export_requested.emit(pane, fmt))
        self.splitter.addWidget(pane)
        self._even_out()
        self.set_active(pane)
        self._update_page()
        return pane

    def replace_session(self, pane: ChatPane, session) -> ChatPane:
        """Show another conversation in `pane`'s place."""
        index = self.splitter.indexOf(pane)
        sizes = self.splitter.sizes()
        new = self.add_pane(session)
        self.splitter.insertWidget(index, new)
        self.remove_pane(pane)
        self.splitter.setSizes(sizes)
        self.set_active(new)
        return new

    def remove_pane(self, pane: ChatPane) -> None:
        pane.setParent(None)
        pane.deleteLater()
        if self.active is pane:
            panes = self.panes()
            self.active = None
            if panes:
                self.set_active(panes[-1])
            else:
                self.active_changed.emit(None)
        self._even_out()
        self._update_page()

    def set_active(self, pane: ChatPane) -> None:
        if self.active is pane:
            return
        for p in self.panes():
            p.set_active(p is pane)
        self.active = pane
        self.active_changed.emit(pane)

    def _even_out(self) -> None:
        n = self.splitter.count()
        if n:
            self.splitter.setSizes([max(self.splitter.width(), n) // n] * n)

    def _update_page(self) -> None:
        self.setCurrentIndex(1 if self.panes() else 0)
        self.panes_changed.emit()
