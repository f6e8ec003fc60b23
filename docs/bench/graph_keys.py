"""Which CUDA graphs MLX instantiates during a bench, read from its dot dumps.

MLX_SAVE_CUDA_GRAPHS_DOT_FILE=PREFIX makes MLX's CUDA backend write every committed
graph to PREFIX_<n>.dot (cudaGraphDebugDotPrint). MLX keys its cache of graph execs on a
graph's node types and edges (a kernel counts as "K" whichever it is;
CommandEncoder::commit), keeps 400 (MLX_CUDA_GRAPH_CACHE_SIZE) and instantiates on a miss;
a graph with a node type it cannot update (not a kernel, memset, host, event or child
graph) is instantiated on every commit. py-spy found instantiates in the timed rounds of
`engine bench` (session 41: 1,634 of 3,533 samples in commit). This reads the dumps in
order and prints: commits, distinct structures, the misses an LRU of CAPACITY would take,
commits holding node types MLX cannot update, the node types seen, and where the misses
fall (by dump number). The structure is this script's reading of the dump, not MLX's
string: the same nodes and edges give the same key in both.
With --steps (the bench's --steps-log of the same run), each miss is placed by its dump's
time (the file's mtime, UTC) in the steady step it fell in, and each decode run prints its
misses and its steps over 2x the median with theirs: whether the slow steps are misses.
Run: PYTHONPATH=. python3 docs/bench/graph_keys.py DUMP_FOLDER [--capacity N] [--steps S]
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections import Counter, OrderedDict
from pathlib import Path

from engine.bench.step_spikes import seconds_of_day

TYPES = ("KERNEL", "MEMCPY", "MEMSET", "HOST", "GRAPH", "EMPTY", "WAIT_EVENT", "EVENT_RECORD",
         "EXT_SEMAS_SIGNAL", "EXT_SEMAS_WAIT", "MEM_ALLOC", "MEM_FREE", "BATCH_MEM_OP",
         "CONDITIONAL")
UPDATABLE = {"KERNEL", "MEMSET", "HOST", "GRAPH", "EMPTY", "WAIT_EVENT", "EVENT_RECORD"}
NODE = re.compile(r'^\s*"([^"]+)"\s*\[(.*?)\]\s*;?\s*$', re.S | re.M)
EDGE = re.compile(r'"([^"]+)"\s*->\s*"([^"]+)"')


def node_type(attrs: str) -> str:
    """A node's type from its label; a kernel node's label is its number and mangled name
    only, drawn as an octagon (an H100's dumps, session 44: every kernel read "OTHER")."""
    label = re.search(r'label="(.*?)"', attrs, re.S)
    text = label.group(1) if label else attrs
    for t in TYPES:
        if re.search(rf"\b{t}\b", text):
            return t
    return "KERNEL" if re.search(r'shape="octagon"', attrs) else "OTHER"


def structure(text: str) -> tuple[tuple, list[str]]:
    """(key, node types in order): nodes numbered by first declaration, edges by number."""
    edges = EDGE.findall(text)
    body = EDGE.sub("", text)
    order, types = {}, []
    for name, attrs in NODE.findall(body):
        if name not in order:
            order[name] = len(order)
            types.append(node_type(attrs))
    pairs = sorted((order.get(a, -1), order.get(b, -1)) for a, b in edges)
    return (tuple(types), tuple(pairs)), types


def kernel_names(text: str) -> list[str]:
    """The (mangled) function names of a dump's kernel nodes: a label's line after its
    number."""
    names = []
    for _, attrs in NODE.findall(EDGE.sub("", text)):
        if node_type(attrs) == "KERNEL":
            label = re.search(r'label="(.*?)"', attrs, re.S)
            lines = label.group(1).split("\n") if label else []
            names.append(lines[1].strip() if len(lines) > 1 else "?")
    return names


def cluster_suspects(names: Counter) -> dict[str, int]:
    """Kernels that may launch in clusters (CUTLASS's sm90 GEMMs): MLX does not update a
    graph holding a kernel whose cluster's y or z is over 1 (`subgraph_to_key`), so every
    commit of it is instantiated; the dump without its verbose flag does not show the
    cluster, so this goes by name."""
    return {n: c for n, c in names.items() if re.search(r"cutlass|[Ss]m90|cluster", n)}


def dumps(folder: Path) -> list[Path]:
    def number(p: Path) -> int:
        m = re.search(r"_(\d+)\.dot$", p.name)
        return int(m.group(1)) if m else -1
    return sorted(folder.glob("*.dot"), key=number)


def misses(files: list[Path], capacity: int) -> tuple[list[int], int, int, Counter, Counter]:
    """(dump indices an LRU of `capacity` misses, distinct updatable structures, dumps
    with a type MLX cannot update, node types seen, the misses by cause). A miss's cause:
    "evicted" (this structure was cached before), "edges" (its node sequence was seen
    with other edges: MLX draws an edge where an input's buffer was last written in the
    same commit, so a buffer handed out again can change them), or "new" (a node
    sequence not seen before)."""
    lru: OrderedDict = OrderedDict()
    seen, sequences, kinds, causes, stuck, missed = set(), set(), Counter(), Counter(), 0, []
    for i, path in enumerate(files):
        key, types = structure(path.read_text(errors="replace"))
        kinds.update(types)
        if not set(types) <= UPDATABLE:
            stuck += 1
            continue
        if key in lru:
            lru.move_to_end(key)
        else:
            missed.append(i)
            causes["evicted" if key in seen else "edges" if key[0] in sequences else "new"] += 1
            lru[key] = True
            if len(lru) > capacity:
                lru.popitem(last=False)
        seen.add(key)
        sequences.add(key[0])
    return missed, len(seen), stuck, kinds, causes


def dump_time(path: Path) -> float:
    """The dump's mtime as seconds since midnight, UTC (the steps log's clock)."""
    t = path.stat().st_mtime
    g = time.gmtime(t)
    return g.tm_hour * 3600 + g.tm_min * 60 + g.tm_sec + (t % 1)


def by_step(steps_log: Path, miss_times: list[float]) -> list[str]:
    """Per decode run: misses within its steady steps, and its slow steps' misses."""
    lines = []
    for raw in steps_log.read_text().splitlines():
        run = json.loads(raw)
        steps = run.get("steps") or []
        if not steps:
            continue
        spans = [(seconds_of_day(st["clock"]), st["ms"]) for st in steps]
        inside = [sum(t0 <= t <= t0 + ms / 1e3 for t in miss_times) for t0, ms in spans]
        median = statistics.median(ms for _, ms in spans)
        slow = [f"step {i} {ms / median:.2f}x: {inside[i]} misses"
                for i, (_, ms) in enumerate(spans) if ms > 2 * median]
        lines.append(f"run {run.get('run')} B={run.get('size')}: {sum(inside)} misses in "
                     f"{len(spans)} steady steps, at {[i for i, n in enumerate(inside) if n]}"
                     + (f"; over 2x: {', '.join(slow)}" if slow else ""))
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", type=Path)
    p.add_argument("--capacity", type=int, default=400)
    p.add_argument("--steps", type=Path, default=None, help="the bench's --steps-log")
    args = p.parse_args()
    files = dumps(args.folder)
    if not files:
        sys.exit(f"no .dot files in {args.folder}")
    missed, distinct, stuck, kinds, causes = misses(files, args.capacity)
    print(f"{len(files)} commits, {distinct} distinct updatable structures, "
          f"{len(missed)} misses with an LRU of {args.capacity} ({dict(causes)}), "
          f"{stuck} commits with a node type MLX cannot update")
    print("node types:", dict(kinds.most_common()))
    tenth = max(1, len(files) // 10)
    spread = Counter(i // tenth for i in missed)
    print("misses by tenth of the dumps:", [spread.get(t, 0) for t in range(10)])
    if args.steps:
        print("\n".join(by_step(args.steps, [dump_time(files[i]) for i in missed])))
    names = Counter()
    for path in files:
        names.update(kernel_names(path.read_text(errors="replace")))
    print("kernel names, most launched:", names.most_common(12))
    print("kernels that may launch in clusters (by name):", cluster_suspects(names))
    print("first dump's first 600 characters (to check this reading):")
    print(files[0].read_text(errors="replace")[:600])


if __name__ == "__main__":
    main()
