"""Issue 26 item 2: a prompt cache folder that is damaged, shared, full or deleted.

Never a crash, never a wrong continuation: each follow-up turn's greedy tokens equal
those of an engine without a cache. A bad file is deleted (a link: the link only, its
target untouched) and reported once; a vanished file is a plain miss.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from reliability_util import REPO, run_script

from engine import Engine, EngineConfig, SamplingParams
from engine.cache import disk_format
from engine.cache.disk_cache import DiskCache, list_files
from engine.events import CacheNoticeEvent

GREEDY = SamplingParams(max_tokens=6, temperature=0.0)
HISTORY = np.random.default_rng(8).integers(5, 300, 41).tolist()
KEY = "b" * 64


def config(cache_dir=None) -> EngineConfig:
    return EngineConfig(num_pages=64, page_size=4, prefill_chunk=16,
                        cache_dir=str(cache_dir) if cache_dir else None)


@pytest.fixture(scope="module")
def scratch(tiny_folder):
    """Greedy tokens without any cache, by prompt."""
    memo = {}

    def get(prompt):
        key = tuple(prompt)
        if key not in memo:
            with Engine.load(tiny_folder, EngineConfig(num_pages=64, page_size=4,
                                                       prefix_cache=False)) as e:
                memo[key] = e.generate([prompt], GREEDY)[0].token_ids
        return memo[key]
    return get


def first_turn(folder, cache_dir) -> list[int]:
    """Turn 1 written to the folder; returns the next turn's prompt."""
    with Engine.load(folder, config(cache_dir)) as e:
        out = e.generate([HISTORY], GREEDY)[0]
    assert list_files(cache_dir)
    return HISTORY + list(out.token_ids) + [11, 12, 13]


def entry(cache_dir):
    files = [p for p, _, _ in list_files(cache_dir)]
    assert len(files) == 1
    return files[0]


def truncate(path, outside):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def flip_bit(path, outside):
    data = bytearray(path.read_bytes())
    data[-100] ^= 0x10                                  # in the K/V data: only the CRC sees it
    path.write_bytes(bytes(data))


def to_directory(path, outside):
    path.unlink()
    path.mkdir()
    (path / "x").write_text("not an entry")


def to_symlink(path, outside):
    shutil.copy(path, outside)                          # a valid entry, outside the folder
    path.unlink()
    path.symlink_to(outside)


def garbage_header(path, outside):
    path.write_bytes((10 ** 18).to_bytes(8, "little") + b"{" * 100)


DAMAGE = [truncate, flip_bit, to_directory, to_symlink, garbage_header]


@pytest.mark.parametrize("when", ["before_start", "while_running"])
@pytest.mark.parametrize("damage", DAMAGE, ids=lambda f: f.__name__)
def test_a_damaged_entry_misses_and_the_continuation_is_right(tiny_folder, tmp_path, scratch,
                                                              damage, when):
    cache_dir, outside = tmp_path / "cache", tmp_path / "outside.safetensors"
    follow = first_turn(tiny_folder, cache_dir)
    path = entry(cache_dir)
    if when == "before_start":
        damage(path, outside)
    notices = []
    with Engine.load(tiny_folder, config(cache_dir)) as e:
        e.add_listener(lambda ev: isinstance(ev, CacheNoticeEvent) and notices.append(ev))
        if when == "while_running":
            damage(path, outside)
        out = e.generate([follow], GREEDY)[0]
        again = e.generate([follow[:30]], GREEDY)[0]       # the engine serves on
    assert out.token_ids == scratch(follow)
    assert again.token_ids == scratch(follow[:30])
    assert out.stats.cached_tokens == 0 or damage is to_directory and when == "before_start"
    if damage is to_symlink:
        assert outside.is_file() and not path.is_symlink()   # the link went, not its target
    if when == "while_running":
        assert len([n for n in notices if "damaged" in n.message]) == 1


@pytest.mark.parametrize("damage", DAMAGE, ids=lambda f: f.__name__)
def test_a_bad_entry_is_reported_once(tmp_path, damage):
    """At the scan and at a read: one notice per bad file, never again for it."""
    folder, outside = tmp_path / "cache", tmp_path / "outside.safetensors"
    cache = DiskCache(folder, KEY, 1 << 30)
    ids = tuple(range(1, 20))
    cache.save(ids, {"kv.0.k": disk_format.Tensor("F32", np.ones((19, 2, 4), np.float32))})
    cache.wait()
    cache.close()
    damage(folder / cache.name_for(ids), outside)
    notes: list[str] = []
    again = DiskCache(folder, KEY, 1 << 30, notify=notes.append)
    hit, n = again.match(list(ids) + [7], exact_only=False)
    if hit is not None:                                 # the scan cannot see a flipped bit
        assert again.load(hit, n) is None
        assert again.match(list(ids) + [7], exact_only=False) == (None, 0)
    DiskCache(folder, KEY, 1 << 30, notify=notes.append).close()   # the file is gone now
    again.close()
    # A folder in its place cannot be deleted (the cache never deletes a folder's
    # contents): each new engine tells about it once.
    assert len(notes) == (2 if damage is to_directory else 1), notes
    assert all("damaged" in n for n in notes)
    if damage is to_symlink:
        assert outside.is_file()


def test_an_unreadable_entry_misses(tiny_folder, tmp_path, scratch, monkeypatch):
    cache_dir = tmp_path / "cache"
    follow = first_turn(tiny_folder, cache_dir)
    path = str(entry(cache_dir))
    real_open = os.open

    def deny(p, *args, **kw):          # chmod 000 means nothing to root: refuse it here
        if str(p) == path:
            raise PermissionError(errno.EACCES, "Permission denied", p)
        return real_open(p, *args, **kw)
    monkeypatch.setattr(disk_format.os, "open", deny)
    with Engine.load(tiny_folder, config(cache_dir)) as e:
        out = e.generate([follow], GREEDY)[0]
    assert out.token_ids == scratch(follow) and out.stats.cached_tokens == 0


def test_the_folder_deleted_while_running(tiny_folder, tmp_path, scratch):
    cache_dir = tmp_path / "cache"
    follow = first_turn(tiny_folder, cache_dir)
    other = HISTORY[:20] + [99, 98, 97]
    with Engine.load(tiny_folder, config(cache_dir)) as e:
        shutil.rmtree(cache_dir)
        assert e.generate([follow], GREEDY)[0].token_ids == scratch(follow)
        assert e.generate([other], GREEDY)[0].token_ids == scratch(other)
    assert list_files(cache_dir)                         # made again, and written to
    with Engine.load(tiny_folder, config(cache_dir)) as e:
        resumed = e.generate([other + [5, 6]], GREEDY)[0]
    assert resumed.stats.cached_tokens > 0
    assert resumed.token_ids == scratch(other + [5, 6])


class _FillsUp:
    """A file whose writes fail with ENOSPC once `room` bytes are written."""

    def __init__(self, path, room):
        self.f, self.room = open(path, "wb"), room

    def write(self, b):
        if len(b) > self.room:
            self.f.write(b[: self.room])
            self.room = 0
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= len(b)
        return self.f.write(b)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


def test_a_disk_that_fills_mid_write_leaves_no_partial_file(tiny_folder, tmp_path, scratch,
                                                           monkeypatch):
    cache_dir = tmp_path / "cache"
    monkeypatch.setattr(disk_format, "open", lambda p, mode: _FillsUp(p, 5000), raising=False)
    notices = []
    with Engine.load(tiny_folder, config(cache_dir)) as e:
        e.add_listener(lambda ev: isinstance(ev, CacheNoticeEvent) and notices.append(ev))
        first = e.generate([HISTORY], GREEDY)[0]
        e.generate([HISTORY[:10]], GREEDY)
        follow = HISTORY + list(first.token_ids) + [4]
        assert e.generate([follow], GREEDY)[0].token_ids == scratch(follow)
    assert os.listdir(cache_dir) == []                   # no torn entry, no temporary file
    assert len(notices) == 1 and "full" in notices[0].message


def test_a_tiny_full_filesystem(tiny_folder, tmp_path, scratch):
    """A real 64 KB tmpfs (where this machine lets the test mount one)."""
    mnt = tmp_path / "tiny-fs"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root); the ENOSPC test above covers it")
    try:
        notices = []
        prompts = [[i, *HISTORY[i:]] for i in range(1, 12)]   # ~20 KB of K/V each
        with Engine.load(tiny_folder, config(mnt)) as e:
            e.add_listener(lambda ev: isinstance(ev, CacheNoticeEvent) and notices.append(ev))
            for p in prompts:
                assert e.generate([p], GREEDY)[0].token_ids == scratch(p)
        assert len(notices) == 1 and "full" in notices[0].message
        assert not [n for n in os.listdir(mnt) if n.endswith(disk_format.TMP_SUFFIX)]
        with Engine.load(tiny_folder, config(mnt)) as e:     # what was written reads back
            p = prompts[0] + [7, 8]
            assert e.generate([p], GREEDY)[0].token_ids == scratch(p)
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


_SHARER = r"""
import json, sys
from engine import Engine, EngineConfig, SamplingParams
folder, cache_dir, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
import numpy as np
rng = np.random.default_rng(seed)
common = np.random.default_rng(0)
greedy = SamplingParams(max_tokens=6, temperature=0.0)
cfg = EngineConfig(num_pages=64, page_size=4, prefill_chunk=16, cache_dir=cache_dir,
                   disk_cache_mb=1)          # tight: both processes evict each other's files
out = []
with Engine.load(folder, cfg) as e:
    for turn in range(12):
        # half the prompts are the other process's too: both write the same names at once
        base = (common if turn % 2 else rng).integers(5, 300, 30).tolist()
        r = e.generate([base], greedy)[0]
        follow = base + list(r.token_ids) + [7]
        out.append([base, list(r.token_ids), follow, list(e.generate([follow], greedy)[0].token_ids)])
print(json.dumps(out))
"""


_READ_ALL = r"""
import sys
from pathlib import Path
from engine.cache.disk_cache import list_files
from engine.cache.disk_format import open_entry, read_entry, read_header
files = list_files(Path(sys.argv[1]))
good = 0
for path, size, _ in files:
    with open_entry(str(path)) as f:
        key = read_header(f, size)[0]["__metadata__"]["model"]
    good += bool(read_entry(str(path), key))
print(len(files), good)
"""


def test_two_processes_share_one_folder(tiny_folder, tmp_path, scratch):
    cache_dir = tmp_path / "shared"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-c", _SHARER, str(tiny_folder), str(cache_dir),
                               str(seed)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for seed in (1, 2)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert "Traceback" not in err
        results.append(json.loads(out))
    for runs in results:
        for base, first, follow, second in runs:
            assert first == list(scratch(base)) and second == list(scratch(follow))
    # a third process reads what the two left: every file whole, its checksum right
    check = run_script(_READ_ALL, str(cache_dir))
    assert check.returncode == 0, check.stderr
    num_files, num_good = map(int, check.stdout.split())
    assert num_files == num_good > 0
    assert not [n for n in os.listdir(cache_dir) if n.endswith(disk_format.TMP_SUFFIX)]


def test_a_temporary_file_left_by_a_crash_is_removed(tmp_path):
    folder = tmp_path / "cache"
    folder.mkdir()
    stale = folder / f"v1-{'b' * 16}-x.safetensors.123-ab{disk_format.TMP_SUFFIX}"
    fresh = folder / f"v1-{'b' * 16}-y.safetensors.456-cd{disk_format.TMP_SUFFIX}"
    stale.write_bytes(b"x" * 100)
    fresh.write_bytes(b"x" * 100)
    os.utime(stale, (1, 1))
    DiskCache(folder, KEY, 1 << 30).close()
    assert not stale.exists() and fresh.exists()      # a live writer's file is left alone


def test_entry_names_never_collide_between_writers(tmp_path, monkeypatch):
    """Two writers of one entry (two processes or two engines) use distinct temporary
    files: before, both wrote `{name}.tmp{pid}`, so two engines in one process could
    interleave their bytes into one file."""
    seen = []
    real_replace = os.replace
    monkeypatch.setattr(disk_format.os, "replace",
                        lambda a, b: (seen.append(a), real_replace(a, b)))
    tensors = {"ids": disk_format.Tensor("I32", np.arange(4, dtype=np.int32))}
    for _ in range(2):
        disk_format.write_entry(str(tmp_path / "e.safetensors"), tensors, KEY)
    assert len(set(seen)) == 2
    assert os.listdir(tmp_path) == ["e.safetensors"]
