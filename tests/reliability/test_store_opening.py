"""Issue 17 items 8 and 10: a damaged database, a read-only data folder and a second
instance on one folder never end in a traceback; nothing is deleted."""
from __future__ import annotations

import os
import random
import sqlite3
import subprocess
import sys

import pytest
from reliability_util import REPO, run_script

from app.storage.conversation import Conversation
from app.storage.instance_lock import AlreadyRunningError, InstanceLock
from app.storage.message import Message
from app.storage.store import DB_NAME, Store
from app.storage.store_opening import open_store


def fill(folder, n_convs=30, text="hello " * 200):
    store = Store(folder)
    for i in range(n_convs):
        conv = store.create_conversation(Conversation(title=f"chat {i}"))
        for pos in range(4):
            store.add_message(conv.id, pos, Message("user", f"{i}/{pos} {text}"))
    store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    return folder / DB_NAME


def moved_files(folder):
    return sorted(p.name for p in folder.iterdir() if ".corrupt-" in p.name)


def check_fresh_start(folder, opened, original: bytes):
    assert "moved aside" in opened.notice and str(folder) in opened.notice
    assert not opened.banner and not opened.store.in_memory
    assert opened.store.conversations() == []
    opened.store.create_conversation(Conversation(title="works"))    # writable
    kept = [p for p in moved_files(folder) if not p.endswith(("-wal", "-shm"))]
    assert len(kept) == 1 and (folder / kept[0]).read_bytes() == original
    assert kept[0] in opened.notice
    opened.close()


def test_random_bytes_are_moved_aside_and_a_fresh_database_starts(tmp_path):
    path = tmp_path / DB_NAME
    junk = random.Random(0).randbytes(50_000)
    path.write_bytes(junk)
    check_fresh_start(tmp_path, open_store(tmp_path), junk)


def test_overwritten_pages_are_found_at_open(tmp_path):
    path = fill(tmp_path)
    data = bytearray(path.read_bytes())
    page = 4096
    assert len(data) > 8 * page
    rng = random.Random(1)
    for p in (2, 3, 5):       # keep the header page: the file still says "SQLite"
        data[p * page:(p + 1) * page] = rng.randbytes(page)
    path.write_bytes(bytes(data))
    check_fresh_start(tmp_path, open_store(tmp_path), bytes(data))


def test_wal_and_shm_go_aside_with_the_damaged_file(tmp_path):
    (tmp_path / DB_NAME).write_bytes(b"not a database at all" * 100)
    (tmp_path / f"{DB_NAME}-wal").write_bytes(b"wal bytes")
    (tmp_path / f"{DB_NAME}-shm").write_bytes(b"shm bytes")
    open_store(tmp_path).close()
    names = moved_files(tmp_path)
    assert len(names) == 3 and any(n.endswith("-wal") for n in names)
    wal = next(n for n in names if n.endswith("-wal"))
    assert (tmp_path / wal).read_bytes() == b"wal bytes"


def test_an_intact_database_opens_as_before(tmp_path):
    fill(tmp_path, n_convs=3)
    opened = open_store(tmp_path)
    assert (opened.notice, opened.banner) == ("", "")
    assert len(opened.store.conversations()) == 3
    opened.close()
    assert moved_files(tmp_path) == []


# -- item 10: one instance per data folder ---------------------------------------------------
def test_a_second_open_of_one_folder_is_refused_until_the_first_closes(tmp_path):
    first = open_store(tmp_path)
    with pytest.raises(AlreadyRunningError, match=f"process {os.getpid()}"):
        open_store(tmp_path)
    first.close()
    open_store(tmp_path).close()


def test_the_lock_of_a_killed_instance_does_not_block(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\n"
         "from app.storage.instance_lock import InstanceLock\n"
         "lock = InstanceLock(sys.argv[1]); lock.acquire(); print('held', flush=True); time.sleep(600)",
         str(tmp_path)], stdout=subprocess.PIPE, text=True, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(AlreadyRunningError, match=f"process {holder.pid}"):
            InstanceLock(tmp_path).acquire()
    finally:
        holder.kill()           # kill -9: the OS drops its lock
        holder.wait(60)
    lock = InstanceLock(tmp_path)
    lock.acquire()
    assert (tmp_path / "tandem.lock").read_text() == str(os.getpid())
    lock.release()


# -- item 8: a read-only data folder ---------------------------------------------------------
READ_ONLY_SCRIPT = """
import json, sys
from pathlib import Path
from app.storage.conversation import Conversation
from app.storage.store_opening import open_store
opened = open_store(Path(sys.argv[1]))
titles = [c.title for c in opened.store.conversations()]
opened.store.create_conversation(Conversation(title="in memory"))
print(json.dumps({"banner": opened.banner, "memory": opened.store.in_memory,
                  "titles": titles, "after": len(opened.store.conversations())}))
"""


def run_without_write_access(code, *args):
    """Root ignores file modes: drop the capabilities that let it (setpriv)."""
    if os.geteuid() != 0:
        return run_script(code, *args)
    caps = "-dac_override,-dac_read_search,-fowner"
    return run_script(f"import os, sys; os.execvp('setpriv', ['setpriv', "
                      f"'--bounding-set={caps}', '--inh-caps={caps}', sys.executable, "
                      f"'-c', {code!r}, *sys.argv[1:]])", *args)


def test_a_read_only_folder_runs_in_memory_with_its_history(tmp_path):
    import json
    fill(tmp_path, n_convs=2)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    os.chmod(tmp_path / DB_NAME, 0o444)
    os.chmod(tmp_path, 0o555)
    try:
        proc = run_without_write_access(READ_ONLY_SCRIPT, str(tmp_path))
    finally:
        os.chmod(tmp_path, 0o755)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["memory"] and "Read-only" in out["banner"] and str(tmp_path) in out["banner"]
    assert sorted(out["titles"]) == ["chat 0", "chat 1"] and out["after"] == 3
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_a_missing_folder_under_a_read_only_parent_runs_in_memory(tmp_path):
    import json
    os.chmod(tmp_path, 0o555)
    try:
        proc = run_without_write_access(READ_ONLY_SCRIPT, str(tmp_path / "data"))
    finally:
        os.chmod(tmp_path, 0o755)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["memory"] and out["titles"] == [] and out["after"] == 1


def test_sqlite_refuses_to_write_without_the_dropped_capabilities(tmp_path):
    """The harness itself: without it, the read-only tests would test nothing."""
    os.chmod(tmp_path, 0o555)
    try:
        proc = run_without_write_access(
            "import sys, pathlib; pathlib.Path(sys.argv[1], 'x').write_text('x')",
            str(tmp_path))
    finally:
        os.chmod(tmp_path, 0o755)
    assert proc.returncode != 0 and "Permission" in proc.stderr
    assert sqlite3.sqlite_version
