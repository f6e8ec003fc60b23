"""Time to first token of a conversation's next turn after a restart, with and without
the disk prompt cache, against the same turn with the in-memory cache.

    PYTHONPATH=. python -m engine.bench.disk_cache_ttft [--model M] [--history 1000] [--rounds 3]

Each phase runs in its own process (a restart is a new process):
  warm     turn 1 of a conversation of --history tokens; once its cache entry is on
           disk the folder is copied (the disk as a restart after turn 1 finds it);
           then turn 2 in the same engine (the in-memory cache);
  memory   (rounds 2..) a new process on a fresh copy of that folder re-creates the
           state after turn 1 (turn 1's ids read back from disk), then turn 2 from
           memory: more in-memory samples without re-reading the history each time;
  disk     --rounds new processes, each on a fresh copy of that folder: turn 2;
  scratch  a new process without a cache folder: variant 0 (the history read in full).
Prints one JSON line per measurement and a summary of medians (docs/PERFORMANCE.md).
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORDS = ("the engine keeps every finished turn so that the next message of a long "
         "conversation reads only what is new while the history stays in the cache ").split()


def _history(tokenizer, n: int) -> list[dict]:
    """A user message of about n tokens (ordinary English words)."""
    text, words = "", 0
    while len(tokenizer.encode_prompt(text or "x")) < n:
        text += " ".join(WORDS[(words + i) % len(WORDS)] for i in range(64)) + "\n"
        words += 64
    return [{"role": "user", "content": text}]


def _turn2(tokenizer, history: list[dict], answer: str, variant: int) -> list[int]:
    return tokenizer.encode_prompt(history + [
        {"role": "assistant", "content": answer},
        {"role": "user", "content": f"Now say that again in one short sentence ({variant})."}])


def _ttft(engine, prompt: list[int], max_tokens: int) -> dict:
    from engine import SamplingParams
    out = engine.submit(prompt, SamplingParams(max_tokens=max_tokens, temperature=0.0)).result()
    return {"ttft_s": out.stats.ttft_s, "prompt_tokens": out.stats.prompt_tokens,
            "reused": out.stats.cached_tokens, "text": out.text,
            "token_ids": list(out.token_ids)}


def run_phase(args) -> list[dict]:
    from engine import Engine, EngineConfig
    work = Path(args.workdir)
    cache = {"warm": work / "cache", "scratch": None}.get(
        args.phase, work / f"{args.phase}-{args.variant}")
    if args.phase in ("disk", "memory"):
        shutil.copytree(work / "after-turn-1", cache)
    cfg = EngineConfig(cache_dir=str(cache) if cache else None,
                       max_context=max(8192, 2 * args.history))
    with Engine.load(args.model, cfg) as engine:
        history = _history(engine.tokenizer, args.history)
        n_history = len(engine.tokenizer.encode_prompt(history))
        turn1 = engine.tokenizer.encode_prompt(history)
        if args.phase == "warm":
            first = _ttft(engine, turn1, args.answer_tokens)
            (work / "answer.json").write_text(json.dumps(first))
            _copy_when_written(cache, work / "after-turn-1")
        first = json.loads((work / "answer.json").read_text())
        if args.phase == "memory":     # turn 1's K/V back in the pool, as after turn 1
            _ttft(engine, turn1 + first["token_ids"], 1)
        r = _ttft(engine, _turn2(engine.tokenizer, history, first["text"], args.variant), 1)
    del r["text"], r["token_ids"]
    return [{"phase": args.phase, "variant": args.variant, "history_tokens": n_history, **r}]


def _copy_when_written(folder: Path, to: Path, timeout: float = 120.0) -> None:
    """Copy the cache files once turn 1's entry is there (files appear whole: they are
    renamed into place)."""
    from engine.cache.disk_cache import list_files
    deadline = time.monotonic() + timeout
    while not list_files(folder) and time.monotonic() < deadline:
        time.sleep(0.05)
    to.mkdir()
    for path, _, _ in list_files(folder):
        shutil.copy2(path, to)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None, help="model folder or .gguf (default: built-in)")
    p.add_argument("--history", type=int, default=1000, help="turn 1's prompt tokens")
    p.add_argument("--answer-tokens", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3, help="turn-2 measurements per cache")
    p.add_argument("--phase", choices=("warm", "memory", "disk", "scratch"), default=None)
    p.add_argument("--variant", type=int, default=0, help="(disk) which turn 2")
    p.add_argument("--workdir", default=None, help="(phases) the shared scratch folder")
    args = p.parse_args(argv)
    if args.phase:
        for line in run_phase(args):
            print(json.dumps(line), flush=True)
        return 0
    with tempfile.TemporaryDirectory(prefix="tandem-disk-bench-") as folder:
        mem = _subprocess(args, folder, "warm")
        mem += [r for v in range(1, args.rounds) for r in _subprocess(args, folder, "memory", v)]
        disk = [r for v in range(args.rounds) for r in _subprocess(args, folder, "disk", v)]
        scratch = _subprocess(args, folder, "scratch")
    _summary(mem, disk, scratch)
    return 0


def _summary(mem: list[dict], disk: list[dict], scratch: list[dict]) -> None:
    m, d, s = (statistics.median(r["ttft_s"] for r in rs) for rs in (mem, disk, scratch))
    print(f"history {mem[0]['history_tokens']} tokens, turn 2 {disk[0]['prompt_tokens']} "
          f"tokens; median TTFT: in memory {m:.3f} s (reused {mem[0]['reused']}), after a "
          f"restart with the disk cache {d:.3f} s (reused {disk[0]['reused']}), after a "
          f"restart without {s:.3f} s; disk/memory {d / m:.2f}x, without/disk {s / d:.1f}x")


def _subprocess(args, folder: str, phase: str, variant: int = 0) -> list[dict]:
    cmd = [sys.executable, "-m", "engine.bench.disk_cache_ttft", "--phase", phase,
           "--workdir", folder, "--history", str(args.history), "--rounds", str(args.rounds),
           "--answer-tokens", str(args.answer_tokens), "--variant", str(variant)]
    if args.model:
        cmd += ["--model", args.model]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    lines = [json.loads(x) for x in out.strip().splitlines() if x.startswith("{")]
    for line in lines:
        print(json.dumps(line), flush=True)
    return lines


if __name__ == "__main__":
    sys.exit(main())
