"""Kept turns on disk: a new engine reads a conversation's history back instead of
re-reading it, with the same logits; bad, foreign and outdated files only miss."""
from __future__ import annotations

import errno
import os

import numpy as np
import pytest
from engine_harness import Harness
from float32_tolerance import assert_close, model_depth
from qwen_fixtures import build_model, random_weights, tiny_config
from tiny_models import tiny_llama

from engine.cache import disk_cache, disk_format
from engine.cache.disk_cache import DiskCache, folder_usage, list_files

RNG = np.random.default_rng(5)
TURN1 = RNG.integers(0, 320, 23).tolist()
NEW_MESSAGE = RNG.integers(0, 320, 6).tolist()
KEY = "a" * 64

MODELS = {"llama": lambda: tiny_llama(),
          "qwen3_5_moe": lambda: build_model(tiny_config("qwen3_5_moe"),
                                             random_weights(tiny_config("qwen3_5_moe"), 3))}


@pytest.fixture(scope="module", params=list(MODELS))
def model(request):
    return MODELS[request.param]()


def recurrent(model) -> bool:
    return bool(model.cache_spec().state_layers)


def first_turn(model, folder, key=KEY, **disk_args):
    """Turn 1 in one engine loop with a disk cache; returns (its sequence, the cache)."""
    disk = DiskCache(folder, key, 1 << 30, **disk_args)
    h = Harness(model, disk=disk)
    seq = h.add(1, TURN1, 5)
    h.run()
    h.loop.save_kept_turns()
    disk.close()
    return seq, disk


def next_turn(model, folder, prompt, key=KEY, **disk_args):
    """The next turn in a new loop (a fresh pool) reading the folder."""
    disk = DiskCache(folder, key, 1 << 30, **disk_args)
    h = Harness(model, disk=disk)
    seq = h.add(2, prompt, 6)
    h.run()
    disk.close()
    return h, seq


def from_scratch(model, prompt):
    ref = Harness(model, prefix_cache=False)
    ref.add(2, prompt, 6)
    return ref.run()


def follow_up(model, first) -> list[int]:
    """Turn 2's prompt: the answer as generated (Llama) or re-rendered (Qwen3 drops
    its reasoning, so the next prompt starts with the previous prompt only)."""
    answer = [7, 7, 7] if recurrent(model) else first.output_ids
    return TURN1 + answer + NEW_MESSAGE


def assert_same_as_scratch(model, h, seq, prompt):
    ref = from_scratch(model, prompt)
    assert seq.output_ids == ref.seqs[2].output_ids
    assert len(h.logits[2]) == len(ref.logits[2])
    for a, b in zip(h.logits[2], ref.logits[2]):
        assert_close(a, b, model_depth(model, seq.num_tokens))


def test_a_new_engine_reads_the_history_back_and_computes_the_same(model, tmp_path):
    first, _ = first_turn(model, tmp_path)
    assert list_files(tmp_path)
    prompt = follow_up(model, first)
    h, seq = next_turn(model, tmp_path, prompt)
    expected = len(TURN1) if recurrent(model) else len(TURN1) + len(first.output_ids) - 1
    assert seq.num_cached >= expected
    assert_same_as_scratch(model, h, seq, prompt)


def test_a_corrupt_file_is_deleted_and_the_turn_is_read_in_full(model, tmp_path):
    first, _ = first_turn(model, tmp_path)
    prompt = follow_up(model, first)
    scan = DiskCache(tmp_path, KEY, 1 << 30)
    entry, n = scan.match(prompt, exact_only=recurrent(model))
    scan.close()
    assert n > 0
    path = tmp_path / entry.name
    size = path.stat().st_size
    with open(path, "r+b") as f:              # one flipped bit deep in the K/V data
        f.seek(size - 7)
        byte = f.read(1)
        f.seek(size - 7)
        f.write(bytes([byte[0] ^ 0x40]))
    h, seq = next_turn(model, tmp_path, prompt)
    assert seq.num_cached == 0
    assert_same_as_scratch(model, h, seq, prompt)
    assert not path.exists()


def test_a_truncated_file_is_deleted_when_the_folder_is_scanned(tmp_path):
    model = MODELS["llama"]()
    first_turn(model, tmp_path)
    (path, size, _), = list_files(tmp_path)
    os.truncate(path, size // 2)
    disk = DiskCache(tmp_path, KEY, 1 << 30)
    assert disk.num_entries == 0 and not path.exists()
    disk.close()


def test_another_models_files_are_kept_but_never_read(model, tmp_path):
    first, _ = first_turn(model, tmp_path, key="b" * 64)
    prompt = follow_up(model, first)
    h, seq = next_turn(model, tmp_path, prompt)
    assert seq.num_cached == 0
    assert_same_as_scratch(model, h, seq, prompt)
    assert any(p.name.startswith(f"v{disk_format.FORMAT_VERSION}-bbbb")
               for p, _, _ in list_files(tmp_path))


def test_a_file_claiming_another_model_under_this_models_name_is_deleted(tmp_path):
    model = MODELS["llama"]()
    first, disk = first_turn(model, tmp_path)
    (path, _, _), = list_files(tmp_path)
    os.rename(path, tmp_path / path.name.replace(KEY[:16], "c" * 16))
    h, seq = next_turn(model, tmp_path, follow_up(model, first), key="c" * 64)
    assert seq.num_cached == 0
    assert not (tmp_path / path.name.replace(KEY[:16], "c" * 16)).exists()


def test_files_of_another_format_version_are_deleted(model, tmp_path, monkeypatch):
    first, _ = first_turn(model, tmp_path)
    old = {p for p, _, _ in list_files(tmp_path)}
    monkeypatch.setattr(disk_format, "FORMAT_VERSION", disk_format.FORMAT_VERSION + 1)
    monkeypatch.setattr(disk_cache, "FORMAT_VERSION", disk_format.FORMAT_VERSION)
    prompt = follow_up(model, first)
    h, seq = next_turn(model, tmp_path, prompt)
    assert seq.num_cached == 0
    assert_same_as_scratch(model, h, seq, prompt)
    assert not any(p.exists() for p in old)


def test_eviction_keeps_the_folder_within_its_budget(tmp_path):
    model = MODELS["llama"]()
    one = first_turn(model, tmp_path)[1]
    size = folder_usage(tmp_path)
    assert size > 0 and one.num_entries == 1
    budget = int(size * 2.5)                  # room for two such entries
    disk = DiskCache(tmp_path, KEY, budget)
    h = Harness(model, disk=disk)
    prompts = [RNG.integers(0, 320, len(TURN1)).tolist() for _ in range(4)]
    for i, p in enumerate(prompts):
        h.add(10 + i, p, 5)
        h.run()
        h.loop.save_kept_turns()
        disk.wait()
        assert folder_usage(tmp_path) <= budget
    disk.close()
    left = DiskCache(tmp_path, KEY, budget)
    assert left.num_entries == 2
    assert left.match(prompts[-1] + [1, 2], exact_only=False)[1] == len(prompts[-1])
    assert left.match(TURN1 + [1, 2], exact_only=False)[1] == 0   # the oldest went first
    left.close()


def test_a_full_disk_stops_writing_with_a_message_and_decoding_goes_on(tmp_path, monkeypatch):
    model = MODELS["llama"]()

    def full(path, tensors, key):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(disk_cache, "write_entry", full)
    notices = []
    disk = DiskCache(tmp_path, KEY, 1 << 30, notify=notices.append)
    h = Harness(model, disk=disk)
    h.add(1, TURN1, 5)
    h.run()
    h.loop.save_kept_turns()
    disk.wait()
    assert not disk.writing and len(notices) == 1 and "full" in notices[0]
    second = h.add(2, TURN1 + NEW_MESSAGE, 8)
    h.run()
    assert len(second.output_ids) == 8 and second.num_cached == len(TURN1)
    assert not list_files(tmp_path) and not list(tmp_path.iterdir())
    disk.close()


def test_a_turn_is_saved_as_it_was_kept_even_when_the_next_turn_overwrites_it(tmp_path):
    """A branch taken at once reuses turn 1's pages and writes over its end in the very
    next step: the save, gathered in that step's plan before its forward, still holds
    turn 1's K/V."""
    model = MODELS["llama"]()
    disk = DiskCache(tmp_path, KEY, 1 << 30)
    h = Harness(model, disk=disk)
    first = h.add(1, TURN1, 5)
    while not first.is_finished:
        h.loop.step()
    branch = h.add(3, TURN1[:9] + NEW_MESSAGE, 4)
    h.run()
    assert branch.num_cached == 9
    disk.close()
    prompt = follow_up(model, first)
    h2, seq = next_turn(model, tmp_path, prompt)
    assert seq.num_cached >= len(TURN1) + len(first.output_ids) - 1
    assert_same_as_scratch(model, h2, seq, prompt)


def test_a_save_copied_to_the_host_one_tensor_per_step_is_the_same(tmp_path, monkeypatch):
    """Long conversations are copied to the host a few MB per busy step: the pieces of a
    save taken over several steps (while another request decodes) make the same entry."""
    from engine.core import step_loop
    monkeypatch.setattr(step_loop, "HOST_COPY_BYTES", 1)
    model = MODELS["llama"]()
    disk = DiskCache(tmp_path, KEY, 1 << 30)
    h = Harness(model, disk=disk)
    first = h.add(1, TURN1, 5)
    h.add(5, NEW_MESSAGE, 30)                 # keeps decoding while turn 1's save is copied
    while not first.is_finished:
        h.loop.step()
    h.loop.step()                             # gathers the save (evaluated with the step)
    h.loop.step()                             # reads that step back: one tensor copied
    assert h.loop.host_copies and not list_files(tmp_path)   # the rest: later steps
    h.run()
    disk.close()
    prompt = follow_up(model, first)
    h2, seq = next_turn(model, tmp_path, prompt)
    assert seq.num_cached >= len(TURN1) + len(first.output_ids) - 1
    assert_same_as_scratch(model, h2, seq, prompt)


def test_entries_read_into_scattered_pages_are_the_same(tmp_path):
    """Fresh pages are usually consecutive (written with one slice); pages left
    scattered by earlier turns take the row-by-row path: both give the same logits."""
    model = MODELS["llama"]()
    first, _ = first_turn(model, tmp_path)
    disk = DiskCache(tmp_path, KEY, 1 << 30)
    h = Harness(model, disk=disk, prefix_cache=True)
    for i in range(4):                        # short turns kept in memory, 2 pages each
        h.add(20 + i, [3 + i] * 5, 1)
        h.run()
    h.loop.cache.evict_lru()                  # the two oldest go: their pages are
    h.loop.cache.evict_lru()                  # handed out first, in reverse order
    prompt = follow_up(model, first)
    seq = h.add(2, prompt, 6)
    h.loop.step()                             # admitted: the entry is read into its pages
    assert seq.pages != list(range(seq.pages[0], seq.pages[0] + len(seq.pages)))
    h.run()
    assert seq.num_cached >= len(TURN1) + len(first.output_ids) - 1
    assert_same_as_scratch(model, h, seq, prompt)
    disk.close()


def test_a_save_is_gathered_before_its_pages_are_handed_out_again(tmp_path):
    """A turn kept (its save pending) and evicted at once for a prompt read from disk
    into the same pages: the save is gathered before that plan's loads and copies."""
    model = MODELS["llama"]()
    first, _ = first_turn(model, tmp_path)                    # entry E1 on disk
    disk = DiskCache(tmp_path, KEY, 1 << 30)
    h = Harness(model, disk=disk, num_pages=13)               # 12 pages: one turn at a time
    other_prompt = RNG.integers(0, 320, len(TURN1)).tolist()
    other = h.add(7, other_prompt, 5)
    while not other.is_finished:
        h.loop.step()
    resumed = h.add(2, follow_up(model, first), 6)           # evicts `other`, reads E1
    h.run()
    assert resumed.num_cached > 0
    disk.close()
    prompt = other_prompt + other.output_ids + NEW_MESSAGE
    h2, seq = next_turn(model, tmp_path, prompt)
    assert seq.num_cached >= len(other_prompt) + len(other.output_ids) - 1
    assert_same_as_scratch(model, h2, seq, prompt)


def test_after_the_folder_is_cleared_a_running_engine_misses_and_writes_again(tmp_path):
    model = MODELS["llama"]()
    disk = DiskCache(tmp_path, KEY, 1 << 30)
    h = Harness(model, disk=disk)
    first = h.add(1, TURN1, 5)
    h.run()
    disk.wait()
    assert len(list_files(tmp_path)) == 1
    kept = tuple(h.loop.cache.prefix.entries[0].ids)
    assert disk.has(kept)
    disk_cache.clear_folder(tmp_path)                      # Settings' Clear button
    assert not disk.has(kept)                              # so the next keep writes it again
    h.loop.cache.clear()                                   # (nothing kept in memory either)
    seq = h.add(2, TURN1 + first.output_ids + NEW_MESSAGE, 3)
    h.run()
    assert seq.num_cached == 0 and seq.output_ids          # a miss, never an error
    disk.close()


def test_a_failed_step_drops_its_saves_and_the_loop_goes_on_writing(tmp_path):
    """The step that gathers turn 1's save raises (a new prompt in it is the culprit):
    that prompt fails, the save is lost, and the next turn is kept and written."""
    disk = DiskCache(tmp_path, KEY, 1 << 30)
    h = Harness(tiny_llama(), disk=disk)
    first = h.add(1, TURN1, 5)
    while first.status.name != "FINISHED":
        h.loop.step()
    assert h.loop.cache.has_pending_saves
    prefill = h.loop.runner._prefill_inputs        # plain and mixed forwards alike
    h.loop.runner._prefill_inputs = lambda chunks: (_ for _ in ()).throw(
        RuntimeError("bad input"))
    h.add(2, NEW_MESSAGE, 5)
    with pytest.raises(RuntimeError):
        h.loop.step()
    h.loop.step_failed("failed: bad input")
    h.loop.runner._prefill_inputs = prefill
    assert not h.loop.cache.has_pending_saves and not h.loop.host_copies
    h.loop.cache.check_invariants()
    follow = TURN1 + first.output_ids + NEW_MESSAGE
    again = h.add(3, follow, 5)
    h.run()
    h.loop.save_kept_turns()
    disk.close()
    ends = {e.request_id: e for e in h.events if e.__class__.__name__ == "FinishedEvent"}
    assert ends[2].reason == "error" and ends[3].reason == "length"
    assert again.num_cached > 0                            # turn 1 still kept in memory
    [stored] = _stored_ids(tmp_path)                       # turn 3, written after all
    assert stored[:len(follow)].tolist() == follow and len(stored) > len(follow)


def _stored_ids(folder):
    return [disk_format.read_ids(str(path), KEY)[0] for path, _, _ in list_files(folder)]
