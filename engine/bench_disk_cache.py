"""Time to first token of a conversation's next turn after a restart, with and without
the disk prompt cache, against the same turn with the in-memory cache.

    PYTHONPATH=. python -m engine.bench_disk_cache [--model M] [--history 1200]

Each phase runs in its own process (a restart is a new process):
  warm     turn 1 of a conversation of --history tokens; once its cache entry is on
           disk the folder is copied (the disk as a restart after turn 1 finds it),
           then turn 2 in the same engine (the in-memory prefix cache);
  disk     a new process with the copied cache folder: turn 2 only;
  scratch  a new process without a cache folder: turn 2 only (the whole history is read).
Prints one JSON line per phase and a summary (docs/PERFORMANCE.md).
"""
from __future__ import annotations

import argparse
import json
import shutil
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


def _turns(tokenizer, n: int) -> tuple[list[int], list[dict]]:
    """Turn 1's prompt ids, and turn 2's messages without the answer (added later)."""
    history = _history(tokenizer, n)
    return tokenizer.encode_prompt(history), history


def _turn2(tokenizer, history: list[dict], answer: str) -> list[int]:
    return tokenizer.encode_prompt(history + [
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "Now say that again in one short sentence."}])


def _ttft(engine, prompt: list[int], max_tokens: int) -> dict:
    from engine import SamplingParams
    t0 = time.perf_counter()
    out = engine.submit(prompt, SamplingParams(max_tokens=max_tokens, temperature=0.0)).result()
    return {"ttft_s": out.stats.ttft_s, "wall_s": time.perf_counter() - t0,
            "prompt_tokens": out.stats.prompt_tokens, "reused": out.stats.cached_tokens,
            "text": out.text}


def run_phase(args) -> dict:
    from engine import Engine, EngineConfig
    work = Path(args.workdir)
    cache = {"warm": work / "cache", "disk": work / "after-turn-1", "scratch": None}[args.phase]
    cfg = EngineConfig(cache_dir=str(cache) if cache else None,
                       max_context=max(8192, 2 * args.history))
    with Engine.load(args.model, cfg) as engine:
        first, history = _turns(engine.tokenizer, args.history)
        answer_file = work / "answer.txt"
        if args.phase == "warm":
            answer = _ttft(engine, first, args.answer_tokens)["text"]
            with open(answer_file, "w") as f:
                f.write(answer)
            _copy_when_written(cache, work / "after-turn-1")
        else:
            answer = open(answer_file).read()
        result = _ttft(engine, _turn2(engine.tokenizer, history, answer), 1)
    result.pop("text")
    return {"phase": args.phase, "history_tokens": len(first), **result}


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
    p.add_argument("--history", type=int, default=1200, help="turn 1's prompt tokens")
    p.add_argument("--answer-tokens", type=int, default=32)
    p.add_argument("--phase", choices=("warm", "disk", "scratch"), default=None)
    p.add_argument("--workdir", default=None, help="(phases) the shared scratch folder")
    args = p.parse_args(argv)
    if args.phase:
        print(json.dumps(run_phase(args)), flush=True)
        return 0
    with tempfile.TemporaryDirectory(prefix="tandem-disk-bench-") as folder:
        results = {ph: _subprocess(args, ph, folder) for ph in ("warm", "disk", "scratch")}
    mem, disk, scratch = (results[k]["ttft_s"] for k in ("warm", "disk", "scratch"))
    print(f"history {results['warm']['history_tokens']} tokens, turn 2 "
          f"{results['disk']['prompt_tokens']} tokens: TTFT in memory {mem:.3f} s "
          f"(reused {results['warm']['reused']}), after restart with disk {disk:.3f} s "
          f"(reused {results['disk']['reused']}), after restart without {scratch:.3f} s; "
          f"disk/memory {disk / mem:.2f}x, scratch/disk {scratch / disk:.1f}x")
    return 0


def _subprocess(args, phase: str, folder: str) -> dict:
    cmd = [sys.executable, "-m", "engine.bench_disk_cache", "--phase", phase,
           "--workdir", folder, "--history", str(args.history),
           "--answer-tokens", str(args.answer_tokens)]
    if args.model:
        cmd += ["--model", args.model]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    line = json.loads(out.strip().splitlines()[-1])
    print(json.dumps(line), flush=True)
    return line


if __name__ == "__main__":
    sys.exit(main())
