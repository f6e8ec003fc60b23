"""Issue 17 items 8 and 10 through the real entry point, `python -m app --data-dir D`,
in a subprocess (offscreen): it starts (no traceback), tells the user, and quits. The
model load is skipped (it has nothing to do with the data folder)."""
from __future__ import annotations

import json
import os
import random

from reliability_util import run_script

from app.storage.instance_lock import InstanceLock
from app.storage.store import DB_NAME

DRIVER = """
import asyncio, json, sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QMessageBox
import app.__main__ as entry
from app.windows.main_window import MainWindow

seen = {"dialogs": []}
QMessageBox.warning = staticmethod(lambda parent, title, text, *a: seen["dialogs"].append(text))

async def no_model(self, path):
    return True
MainWindow.load_model = no_model
show = MainWindow.show_storage_state

def probe(self, notice, banner):
    show(self, notice, banner)
    box = self.error_box
    seen.update(banner=self.storage_banner.text() if self.storage_banner.isVisible() else "",
                notice=box.text() if box is not None and box.isVisible() else "")
    QTimer.singleShot(0, self.close)
MainWindow.show_storage_state = probe
code = entry.main(["--data-dir", sys.argv[1]])
print(json.dumps({"code": code, **seen}))
"""


def start_app(folder, **kw):
    proc = (kw.pop("runner", run_script))(DRIVER, str(folder))
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_app_starts_on_a_damaged_database_and_names_where_it_went(tmp_path):
    junk = random.Random(2).randbytes(20_000)
    (tmp_path / DB_NAME).write_bytes(junk)
    out = start_app(tmp_path)
    moved = [p for p in tmp_path.iterdir() if ".corrupt-" in p.name]
    assert out["code"] == 0 and len(moved) == 1 and moved[0].read_bytes() == junk
    assert str(moved[0]) in out["notice"] and not out["banner"]
    assert (tmp_path / DB_NAME).is_file()
    # The next start is an ordinary one.
    again = start_app(tmp_path)
    assert (again["notice"], again["banner"]) == ("", "")


def test_second_instance_says_so_and_exits(tmp_path):
    lock = InstanceLock(tmp_path)
    lock.acquire()
    try:
        out = start_app(tmp_path)
    finally:
        lock.release()
    assert out["code"] == 1
    assert len(out["dialogs"]) == 1 and "already running" in out["dialogs"][0]
    assert f"process {os.getpid()}" in out["dialogs"][0]


def test_app_on_a_read_only_folder_shows_the_banner(tmp_path):
    from test_store_opening import fill, run_without_write_access
    fill(tmp_path, n_convs=1)
    os.chmod(tmp_path, 0o555)
    try:
        out = start_app(tmp_path, runner=run_without_write_access)
    finally:
        os.chmod(tmp_path, 0o755)
    assert out["code"] == 0 and "Read-only" in out["banner"] and not out["notice"]
