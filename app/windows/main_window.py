"""The main window: sidebar, side-by-side panes, broadcast box, status dock; it owns
the settings and wires widgets to sessions and the bridge. Which chat shows where is
chat_navigator.py's; the load line load_status.py's; the storage banner
storage_banner.py's."""
from __future__ import annotations

import dataclasses

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QApplication,
    QMainWindow,
    QMessageBox,
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
from app.windows.broadcast_box import BroadcastBox
from app.windows.chat_navigator import ChatNavigator
from app.windows.export_dialog import export_conversation
from app.windows.load_status import LoadStatus
from app.windows.pane_area import PaneArea
from app.windows.sidebar import Sidebar
from app.windows.storage_banner import StorageBanner
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
        self.storage_banner = StorageBanner()
        self.status_panel = StatusPanel(bridge, telemetry, activity=self._activity)
        self._build_layout()
        self.chats = ChatNavigator(self)
        self.load_status = LoadStatus(self, bridge)
        self.model_label, self.progress = self.load_status.label, self.load_status.progress
        build_menus(self)
        self._connect()
        self.conversations.refresh()

    def _build_layout(self) -> None:
        center = QWidget(objectName="center")
        column = QVBoxLayout(center)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(0)
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

    def _connect(self) -> None:
        self.sidebar.pin_requested.connect(self.sessions.set_pinned)
        self.conversations.renamed.connect(self.sessions.rename)
        self.sessions.changed.connect(lambda: self.conversations.refresh())
        self.sessions.error.connect(self.show_error)
        self.panes.pane_settings_requested.connect(self._on_panes_pane_settings_requested)
        self.panes.pane_export_requested.connect(self.export_chat)
        self.broadcast.broadcast_requested.connect(self.chats.broadcast_prompt)
        self.broadcast.stop_all_requested.connect(self.sessions.stop_all)
        self.sessions.busy_changed.connect(self.broadcast.set_busy)
        self.status_panel.trace_toggled.connect(self.trace.set_recording)
        self.status_panel.save_trace_requested.connect(self.save_trace_as)
        self.trace.state_changed.connect(self.status_panel.set_trace_state)
        self.trace.message.connect(lambda text: self.statusBar().showMessage(text, 10000))
        self.store.failed.connect(self._on_store_failed)
        self.store.recovered.connect(self._on_store_recovered)
        self.bridge.load_failed.connect(self._on_bridge_load_failed)
        self.bridge.cache_notice.connect(self._on_bridge_cache_notice)
        self.api.address_changed.connect(self.status_panel.show_api)
        self.api.error.connect(lambda text: self.show_error(text, "Could not start the API"))
        self.appearance.changed.connect(self._on_appearance_changed)

    # conversations and panes (chat_navigator.py)
    def new_conversation(self, new_pane: bool = True):
        return self.chats.new_conversation(new_pane)

    def open_conversation(self, conv_id: int, new_pane: bool = False):
        return self.chats.open_conversation(conv_id, new_pane)

    def close_pane(self, pane) -> None:
        self.chats.close_pane(pane)

    def delete_conversation(self, conv_id: int) -> None:
        self.chats.delete_conversation(conv_id)

    def broadcast_prompt(self, text: str) -> int:
        return self.chats.broadcast_prompt(text)

    # files
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

    # model and settings
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
        dialog = SettingsDialog(self.settings, self, cache_dir=self.prompt_cache,
                                model_path=self.bridge.model_path)
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
        return await self.api.apply(self.settings.serve_api, self.settings.api_port,
                                    self.settings.api_cors_origin)

    def _activity(self) -> list:
        """Every reply in flight, for the status panel: the chats', then the API's."""
        return self.sessions.activity() + self.api.activity()

    # dialogs and messages
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

    def show_error(self, message: str, title: str = "Tandem") -> None:
        """Non-modal, so streaming and the event loop go on."""
        self.last_error = message
        self.error_box = QMessageBox(QMessageBox.Icon.Warning, title, message,
                                     QMessageBox.StandardButton.Ok, self)
        self.error_box.open()

    def show_storage_state(self, notice: str, banner: str) -> None:
        """At start (app/storage/store_opening.py): a damaged database moved aside is
        told once in a dialog; a read-only folder gets a banner for the session."""
        self.storage_banner.show_read_only(banner)
        if notice:
            self.show_error(notice, "Tandem: history database damaged")

    # slots
    def _on_store_failed(self, reason: str) -> None:
        self.storage_banner.show_failure(self.store.path, reason)

    def _on_store_recovered(self) -> None:
        self.storage_banner.show_recovered()
        self.statusBar().showMessage("Saved: everything kept in memory is on disk again.",
                                     10000)

    def _on_panes_pane_settings_requested(self, pane) -> None:
        from app.windows.conversation_settings_dialog import ConversationSettingsDialog
        dialog = ConversationSettingsDialog(pane.session.conversation, self)
        dialog.accepted.connect(lambda: pane.session.update_conversation(dialog.conversation()))
        dialog.open()

    def _on_bridge_cache_notice(self, message: str) -> None:
        self.show_error(message, "Prompt cache")

    def _on_bridge_load_failed(self, message: str) -> None:
        self.show_error(message, "Could not load the model")
        if not self.bridge.model_name:   # nothing loaded, e.g. a bundle without the built-in model
            button = self.error_box.addButton("Open model…", QMessageBox.ButtonRole.ActionRole)
            button.clicked.connect(self.open_model_dialog)

    def _on_appearance_changed(self, _theme: str) -> None:
        # Once the new style sheet has resized the panel's contents (the next turn).
        QTimer.singleShot(0, self._fit_status_panel)

    def _fit_status_panel(self) -> None:
        self.status_panel.fit_to_font()
        self.resizeDocks([self.status_panel], [self.status_panel.natural_width()],
                         Qt.Orientation.Horizontal)

    # Qt overrides
    def showEvent(self, event):
        super().showEvent(event)
        if not getattr(self, "_restored", False):
            self._restored = True
            restore_window_state(self, self.store)
            self.chats.open_start_chat()

    def closeEvent(self, event):
        save_window_state(self, self.store)
        self.trace.close()
        self.sessions.close_all()     # replies in flight are saved as stopped, text kept
        self.bridge.close()           # cancel what runs and join the engine thread now
        super().closeEvent(event)
