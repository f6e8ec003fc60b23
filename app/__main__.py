"""python -m app [--model PATH] [--self-test] [--trace PATH]"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m app", description="Tandem chat")
    parser.add_argument("--model", help="model folder or .gguf file (default: the last one)")
    parser.add_argument("--self-test", action="store_true",
                        help="two panes at once, offscreen; prints one line, exits")
    parser.add_argument("--trace", metavar="PATH", help="record a Chrome/Perfetto trace here")
    parser.add_argument("--data-dir", help="where conversations are kept (or $TANDEM_DATA_DIR)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.self_test:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from app import qt_preflight
    if code := qt_preflight.main():      # name the missing system libraries, not Qt's abort
        return code
    import qasync
    from PySide6.QtWidgets import QApplication

    from app.style import apply_style
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Tandem")
    apply_style(app)
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    with loop:
        if args.self_test:
            import contextlib

            from app.self_test import run_self_test
            with contextlib.redirect_stdout(sys.stderr):    # stdout gets one line
                code, line = loop.run_until_complete(run_self_test(args.model))
            print(line, flush=True)
            return code
        try:
            return loop.run_until_complete(_run_window(app, args))
        except RuntimeError as exc:
            # app.quit() from outside the window (the macOS app menu, a logout) ends Qt's
            # loop at once, before _run_window can finish: aboutToQuit already ran the
            # shutdown (_Shutdown.now), so the only thing left is this report of it.
            if "Event loop stopped before Future completed" not in str(exc):
                raise
            return 0


async def _run_window(app, args) -> int:
    from PySide6.QtWidgets import QMessageBox

    from app.controllers.bridge import EngineBridge
    from app.status.telemetry_adapter import make_telemetry
    from app.storage.data_dir import data_dir
    from app.storage.store_opening import AlreadyRunningError, open_store
    from app.windows.main_window import MainWindow
    try:
        opened = open_store(data_dir(args.data_dir))
    except AlreadyRunningError as e:       # one Tandem per data folder (issue 17 item 10)
        QMessageBox.warning(None, "Tandem is already running", str(e))
        return 1
    store = opened.store
    bridge = EngineBridge()
    telemetry = make_telemetry()
    window = MainWindow(store, bridge, telemetry=telemetry, trace_path=args.trace)
    if args.trace:
        window.status_panel.trace_button.setChecked(True)     # record from the start
    shutdown = _Shutdown(window, telemetry, opened)
    # Quitting is the window closing, and Qt's loop must not end before this coroutine
    # does: with Qt quitting on the last window's close, the steps after the wait ran
    # with no loop ("Event loop stopped before Future completed", issue 22 item 14).
    app.setQuitOnLastWindowClosed(False)
    quit_event = asyncio.Event()
    app.lastWindowClosed.connect(quit_event.set)
    app.aboutToQuit.connect(shutdown.now)
    window.show()
    window.show_storage_state(opened.notice, opened.banner)
    if store.num_interrupted:
        window.statusBar().showMessage(
            f"{store.num_interrupted} reply was interrupted when Tandem last quit.", 8000)
    # The start (the API, the model's load) may still run when the user quits: quitting
    # does not wait for it.
    start = asyncio.ensure_future(_start(window, store, args))
    await quit_event.wait()
    start.cancel()
    await window.api.stop()
    shutdown.now()
    return 0


async def _start(window, store, args) -> None:
    await window.apply_server_settings()       # listening first: 503 while the model loads
    model = args.model or store.get_setting("last_model")
    if not await window.load_model(model) and model and not args.model:
        await window.load_model(None)          # the last model moved: use the default


class _Shutdown:
    """Everything quitting does that needs no event loop, once, from whichever comes
    first: the window's close (then _run_window's end) or Qt's aboutToQuit."""

    def __init__(self, window, telemetry, opened):
        self._window, self._telemetry, self._opened = window, telemetry, opened
        self.done = False

    def now(self) -> None:
        if self.done:
            return
        self.done = True
        window = self._window
        if window.isVisible():
            window.close()                     # saves the layout, stops the replies
        window.trace.close()                   # --trace PATH: the final save
        if self._telemetry is not None:
            self._telemetry.stop()
        window.bridge.close()
        window.store.flush()                   # writes that waited for disk space
        self._opened.close()


if __name__ == "__main__":
    sys.exit(main())
