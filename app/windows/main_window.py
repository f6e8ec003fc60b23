"""The main window: sidebar, side-by-side panes, broadcast box, status dock,
model loading; it wires widgets to sessions and the bridge."""
from __future__ import annotations

import dataclasses

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QApplication,
    QLabel,
    QMainWindow,
    QMessageBox,
    QProgressBar,
    QSplitter,
    QVBoxLayout,
    QWidget,
)
from qasync import asyncSlot

from app.appearance import appearance_for
from app.controllers.conversation_list_model import ConversationListModel
from app.controllers.server_controller import ServerController
from app.controllers.session_registry import SessionRegistry
from app.controllers.store_guard import StoreGuard
from app.dialog_folders import DialogFolders
from app.status.status_panel import StatusPanel
from app.status.trace_controller import TraceController
from app.storage.app_settings import ENGINE_LIMITS, AppSettings
from app.storage.data_dir import prompt_cache_dir
from app.storage.store import UNTOUCHED_TITLE
from app.windows.broadcast_box import BroadcastBox
from app.windows.export_dialog import export_conversation
from app.windows.pane_area import PaneArea
from app.windows.sidebar import Sidebar
from app.windows.window_menus import build_menus
from app.windows.window_state import (
    CENTER_MIN_WIDTH,
    SIDEBAR_MIN_WIDTH,
    restore_window_state,
    save_window_state,
)


class MainWindow(QMainWindow):
    def __init__(self, store, bridge, telemetry=None, trace_path=None, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Tandem")
        self.resize(1280, 800)
        # Writes go through the guard: a full disk queues them instead of raising.
        self.store, self.bridge = StoreGuard(store, self), bridge
        store = self.store
        self.settings = AppSettings.from_dict(store.get_setting("settings", {}))
        self.appearance = appearance_for(QApplication.instance())
        self.appearance.apply(self.settings.theme, self.settings.font_size)
        self.prompt_cache = prompt_cache_dir(store.path.parent)
        self.folders = DialogFolders(store)       # each file dialog's own last folder
        self.sessions = SessionRegistry(store, bridge, self)
        self.api = ServerController(bridge, self)
        self.trace = TraceController(bridge, store.path.parent, telemetry, path=trace_path,
                                     parent=self)
        self.last_error = ""
        self.error_box: QMessageBox | None = None
        self.conversations = ConversationListModel(store, self)
        self.sidebar = Sidebar(self.conversations)
        self.panes = PaneArea()
        self.broadcast = BroadcastBox()
        self.status_panel = StatusPanel(bridge, telemetry, activity=self._activity)
        self._build_layout()
        build_menus(self)
        self._connect()
        self.conversations.refresh()

    def _build_layout(self) -> None:
        center = QWidget(objectName="center")
        column = QVBoxLayout(center)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(0)
        # Storage trouble (read-only folder, disk full), shown until it is over.
        self.storage_banner = QLabel(objectName="storageBanner", wordWrap=True)
        self.storage_banner.setStyleSheet("background: #7a4b00; color: white; padding: 6px;")
        self.storage_banner.hide()
        column.addWidget(self.storage_banner)
        column.addWidget(self.panes, 1)
        column.addWidget(self.broadcast)
        self.main_splitter = QSplitter(Qt.Orientation.Horizontal, objectName="mainSplitter")
        self.main_splitter.addWidget(self.sidebar)
        self.main_splitter.addWidget(center)
        self.main_splitter.setStretchFactor(1, 1)
        self.main_splitter.setChildrenCollapsible(False)
        self.sidebar.setMinimumWidth(SIDEBAR_MIN_WIDTH)
        center.setMinimumWidth(CENTER_MIN_WIDTH)
        self.main_splitter.setSizes([260, 1020])
        self.main_splitter.setHandleWidth(1)
        self.setCentralWidget(self.main_splitter)
        self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, self.status_panel)
        self.model_label = QLabel("No model", objectName="modelLabel")
        self.progress = QProgressBar(objectName="loadProgress", maximum=1000)
        self.progress.setFixedWidth(220)
        self.progress.hide()
        self.statusBar().addWidget(self.model_label, 1)
        self.statusBar().addPermanentWidget(self.progress)

    def _connect(self) -> None:
        self.sidebar.new_requested.connect(self.new_conversation)
        self.sidebar.open_requested.connect(self.open_conversation)
        self.sidebar.delete_requested.connect(self.confirm_delete_conversation)
        self.sidebar.pin_requested.connect(self.sessions.set_pinned)
        self.conversations.renamed.connect(self.sessions.rename)
        self.sessions.changed.connect(lambda: self.conversations.refresh())
        self.sessions.error.connect(self.show_error)
        self.panes.pane_close_requested.connect(self.close_pane)
        self.panes.pane_settings_requested.connect(self._on_panes_pane_settings_requested)
        self.panes.pane_export_requested.connect(self.export_chat)
        self.panes.active_changed.connect(self._on_panes_active_changed)
        self.panes.panes_changed.connect(self._on_panes_panes_changed)
        self.broadcast.broadcast_requested.connect(self.broadcast_prompt)
        self.broadcast.stop_all_requested.connect(self.sessions.stop_all)
        self.sessions.busy_changed.connect(self.broadcast.set_busy)
        self.status_panel.trace_toggled.connect(self.trace.set_recording)
        self.status_panel.save_trace_requested.connect(self.save_trace_as)
        self.trace.state_changed.connect(self.status_panel.set_trace_state)
        self.trace.message.connect(lambda text: self.statusBar().showMessage(text, 10000))
        self.store.failed.connect(self._on_store_failed)
        self.store.recovered.connect(self._on_store_recovered)
        self.bridge.load_started.connect(self._on_bridge_load_started)
        self.bridge.load_progress.connect(self._on_bridge_load_progress)
        self.bridge.model_loaded.connect(self._on_bridge_model_loaded)
        self.bridge.load_failed.connect(self._on_bridge_load_failed)
        self.bridge.cache_notice.connect(self._on_bridge_cache_notice)
        self.api.address_changed.connect(self.status_panel.show_api)
        self.api.error.connect(lambda text: self.show_error(text, "Could not start the API"))
        self.appearance.changed.connect(self._on_appearance_changed)

    # conversations and panes
    def new_conversation(self, new_pane: bool = True):
        active = self.panes.active
        if not new_pane and active is not None and self._untouched(active.session):
            active.composer.setFocus()        # the active chat is already a new one
            return active
        session = self.sessions.create(self.settings)
        if session is None:                   # the database refused (it said why)
            return active
        pane = self._show(session, new_pane)
        pane.composer.setFocus()
        return pane

    def open_conversation(self, conv_id: int, new_pane: bool = False):
        pane = self.panes.pane_for(conv_id)
        if pane is None:
            session = self.sessions.get(conv_id)
            if session is None:
                return None
            pane = self._show(session, new_pane)
        self.panes.set_active(pane)
        self.sidebar.select(conv_id)
        return pane

    def _show(self, session, new_pane: bool):
        active = self.panes.active
        if active is not None and (not new_pane or not self.panes.can_add()):
            return self.panes.replace_session(active, session)
        return self.panes.add_pane(session)

    def close_pane(self, pane) -> None:
        self.panes.remove_pane(pane)

    def confirm_delete_conversation(self, conv_id: int) -> bool:
        """Ask first (the sidebar's Delete); True if it was deleted."""
        conv = self.store.conversation(conv_id)
        if conv is None:
            return False
        answer = QMessageBox.question(
            self, "Delete chat", f"Delete “{conv.title}” and all its messages?\n"
            "This cannot be undone.",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
            QMessageBox.StandardButton.Cancel)
        if answer != QMessageBox.StandardButton.Yes:
            return False
        self.delete_conversation(conv_id)
        return True

    def delete_conversation(self, conv_id: int) -> None:
        pane = self.panes.pane_for(conv_id)
        if pane is not None:
            self.panes.remove_pane(pane)
        self.sessions.delete(conv_id)

    def save_trace_as(self):
        """Ask for a .json file and export the trace recorded so far."""
        return self.trace.choose_and_save(self, self.folders)

    def export_chat(self, pane, fmt: str):
        """Ask for a file and export `pane`'s conversation ("markdown" or "json")."""
        if pane is None:
            self.statusBar().showMessage("Open a chat to export it.", 5000)
            return None
        path = export_conversation(self, self.store, pane.session, fmt)
        if path is not None:
            self.statusBar().showMessage(f"Exported “{pane.session.title}” to {path}", 10000)
        return path

    def broadcast_prompt(self, text: str) -> int:
        panes = self.panes.panes()
        if not panes:                 # nothing open: a new chat gets the prompt
            panes = [self.new_conversation()]
            self.statusBar().showMessage("No chat was open: sent the prompt to a new chat.",
                                         8000)
        for pane in panes:
            pane.session.send(text)
        return len(panes)

    # model
    @asyncSlot()
    async def open_model_dialog(self) -> None:
        from app.windows.model_picker import ModelPicker
        picker = ModelPicker(self.store.get_setting("recent_models", []), self,
                             folders=self.folders)
        if picker.exec() and picker.chosen:
            await self.load_model(picker.chosen)

    async def load_model(self, path: str | None) -> bool:
        ok = await self.bridge.load_model(path, self.settings.engine_config(
            str(self.prompt_cache)))
        if ok and path:
            recent = [path] + [p for p in self.store.get_setting("recent_models", []) if p != path]
            self.store.set_setting("recent_models", recent[:10])
            self.store.set_setting("last_model", path)
        return ok

    @asyncSlot()
    async def open_settings_dialog(self) -> None:
        from app.windows.settings_dialog import SettingsDialog
        dialog = SettingsDialog(self.settings, self, cache_dir=self.prompt_cache)
        if dialog.exec():
            old, self.settings = self.settings, dialog.settings()
            self.store.set_setting("settings", self.settings.to_dict())
            self.appearance.apply(self.settings.theme, self.settings.font_size)
            await self.apply_server_settings()
            changed = any(getattr(old, k) != getattr(self.settings, k) for k in ENGINE_LIMITS)
            if changed and self.bridge.engine and not await self.load_model(
                    self.bridge.model_path):
                # The bridge reloaded the model with the old limits: keep them.
                self.settings = dataclasses.replace(
                    self.settings, **{k: getattr(old, k) for k in ENGINE_LIMITS})
                self.store.set_setting("settings", self.settings.to_dict())
            # After a reload the engine already has it; else (no change, or the old
            # model back after a failed load) it takes it live.
            self.bridge.set_reading_pace(self.settings.min_stream_tok_s)

    async def apply_server_settings(self) -> bool:
        """Start or stop the local API as Settings say; False if it cannot listen."""
        return await self.api.apply(self.settings.serve_api, self.settings.api_port)

    def _activity(self) -> list:
        """Every reply in flight, for the status panel: the chats', then the API's."""
        return self.sessions.activity() + self.api.activity()

    def show_about(self):
        """Help > About: the version, the model, the kernels, where data lives."""
        from app.about_info import about_info
        from app.windows.about_dialog import AboutDialog
        self.about_dialog = AboutDialog(about_info(self.bridge, self.store.path.parent), self)
        self.about_dialog.open()
        return self.about_dialog

    def show_shortcuts(self):
        """Help > Keyboard shortcuts."""
        from app.windows.shortcuts_dialog import ShortcutsDialog
        self.shortcuts_dialog = ShortcutsDialog(self)
        self.shortcuts_dialog.open()
        return self.shortcuts_dialog

    def _on_bridge_cache_notice(self, message: str) -> None:
        self.show_error(message, "Prompt cache")

    def show_error(self, message: str, title: str = "Tandem") -> None:
        """Non-modal, so streaming and the event loop go on."""
        self.last_error = message
        self.error_box = QMessageBox(QMessageBox.Icon.Warning, title, message,
                                     QMessageBox.StandardButton.Ok, self)
        self.error_box.open()

    def show_storage_state(self, notice: str, banner: str) -> None:
        """At start (app/storage/store_opening.py): a damaged database moved aside is
        told once in a dialog; a read-only folder gets a banner for the session."""
        self._read_only_banner = banner
        if banner:
            self.storage_banner.setText(banner)
            self.storage_banner.show()
        if notice:
            self.show_error(notice, "Tandem: history database damaged")

    # slots
    def _on_store_failed(self, reason: str) -> None:
        self.storage_banner.setText(
            f"Tandem cannot save to {self.store.path} ({reason}). Your messages and replies "
            "are kept in memory and saved as soon as there is room again; free some disk "
            "space, and do not quit until this goes away.")
        self.storage_banner.show()

    def _on_store_recovered(self) -> None:
        banner = getattr(self, "_read_only_banner", "")
        self.storage_banner.setText(banner)
        self.storage_banner.setVisible(bool(banner))
        self.statusBar().showMessage("Saved: everything kept in memory is on disk again.",
                                     10000)

    def _on_panes_pane_settings_requested(self, pane) -> None:
        from app.windows.conversation_settings_dialog import ConversationSettingsDialog
        dialog = ConversationSettingsDialog(pane.session.conversation, self)
        dialog.accepted.connect(lambda: pane.session.update_conversation(dialog.conversation()))
        dialog.open()

    def _on_bridge_load_started(self, path: str) -> None:
        self.progress.setValue(0)
        self.progress.show()
        self.model_label.setText(f"Loading {path or 'default model'}…")

    def _on_bridge_load_progress(self, fraction: float, message: str) -> None:
        self.progress.setValue(int(fraction * 1000))
        # One line inside the bar: elide what does not fit rather than wrap and clip.
        width = self.progress.width() - 12
        self.progress.setFormat(self.progress.fontMetrics().elidedText(
            message, Qt.TextElideMode.ElideMiddle, width).replace("%", "%%"))
        self.progress.setToolTip(message)

    def _on_bridge_model_loaded(self, name: str) -> None:
        self.progress.hide()
        self.model_label.setText(f"Model: {name}")
        self.setWindowTitle(f"Tandem — {name}")

    def _on_bridge_load_failed(self, message: str) -> None:
        self.progress.hide()
        current = self.bridge.model_name
        self.model_label.setText(f"Model: {current}" if current else "No model")
        self.show_error(message, "Could not load the model")
        if not current:         # nothing loaded, e.g. a bundled app without the built-in model
            button = self.error_box.addButton("Open model…", QMessageBox.ButtonRole.ActionRole)
            button.clicked.connect(self.open_model_dialog)

    def _on_appearance_changed(self, _theme: str) -> None:
        # Once the new style sheet has resized the panel's contents (the next turn).
        QTimer.singleShot(0, self._fit_status_panel)

    def _fit_status_panel(self) -> None:
        self.status_panel.fit_to_font()
        self.resizeDocks([self.status_panel], [self.status_panel.natural_width()],
                         Qt.Orientation.Horizontal)

    def _on_panes_active_changed(self, pane) -> None:
        self.sidebar.select(pane.session.conversation.id if pane is not None else None)

    def _on_panes_panes_changed(self) -> None:
        self.conversations.set_open_ids(p.session.conversation.id for p in self.panes.panes())

    def _untouched(self, session) -> bool:
        return session.conversation.title == UNTOUCHED_TITLE and session.model.rowCount() == 0

    def _open_start_chat(self) -> None:
        """At start: reuse an empty "New chat" rather than add one more each time,
        and drop the other empty ones that no pane shows."""
        shown = {p.session.conversation.id for p in self.panes.panes()}
        spare = [i for i in self.store.untouched_conversation_ids() if i not in shown]
        if not self.panes.panes():
            if spare:
                self.open_conversation(spare.pop(0), new_pane=True)
            else:
                self.new_conversation()
        for conv_id in spare:
            self.sessions.delete(conv_id)

    # Qt overrides
    def showEvent(self, event):
        super().showEvent(event)
        if not getattr(self, "_restored", False):
            self._restored = True
            restore_window_state(self, self.store)
            self._open_start_chat()

    def closeEvent(self, event):
        save_window_state(self, self.store)
        self.trace.close()
        self.sessions.close_all()     # replies in flight are saved as stopped, text kept
        self.bridge.close()           # cancel what runs and join the engine thread now
        super().closeEvent(event)
