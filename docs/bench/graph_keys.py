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
Run: python3 docs/bench/graph_keys.py DUMP_FOLDER [CAPACITY]
"""
from __future__ import annotations

import re
import sys
from collections import Counter, OrderedDict
from pathlib import Path

TYPES = ("KERNEL", "MEMCPY", "MEMSET", "HOST", "GRAPH", "EMPTY", "WAIT_EVENT", "EVENT_RECORD",
         "EXT_SEMAS_SIGNAL", "EXT_SEMAS_WAIT", "MEM_ALLOC", "MEM_FREE", "BATCH_MEM_OP",
         "CONDITIONAL")
UPDATABLE = {"KERNEL", "MEMSET", "HOST", "GRAPH", "EMPTY", "WAIT_EVENT", "EVENT_RECORD"}
NODE = re.compile(r'^\s*"([^"]+)"\s*\[(.*?)\]\s*;?\s*$', re.S | re.M)
EDGE = re.compile(r'"([^"]+)"\s*->\s*"([^"]+)"')


def node_type(attrs: str) -> str:
    label = re.search(r'label="(.*?)"', attrs, re.S)
    text = label.group(1) if label else attrs
    for t in TYPES:
        if re.search(rf"\b{t}\b", text):
            return t
    return "OTHER"


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


def dumps(folder: Path) -> list[Path]:
    def number(p: Path) -> int:
        m = re.search(r"_(\d+)\.dot$", p.name)
        return int(m.group(1)) if m else -1
    return sorted(folder.glob("*.dot"), key=number)


def main() -> None:
    folder = Path(sys.argv[1])
    capacity = int(sys.argv[2]) if len(sys.argv) > 2 else 400
    files = dumps(folder)
    if not files:
        sys.exit(f"no .dot files in {folder}")
    lru: OrderedDict = OrderedDict()
    seen, kinds, stuck, misses_at = set(), Counter(), 0, []
    for i, path in enumerate(files):
        key, types = structure(path.read_text(errors="replace"))
        kinds.update(types)
        if not set(types) <= UPDATABLE:
            stuck += 1
            continue
        seen.add(key)
        if key in lru:
            lru.move_to_end(key)
        else:
            misses_at.append(i)
            lru[key] = True
            if len(lru) > capacity:
                lru.popitem(last=False)
    print(f"{len(files)} commits, {len(seen)} distinct updatable structures, "
          f"{len(misses_at)} misses with an LRU of {capacity}, "
          f"{stuck} commits with a node type MLX cannot update")
    print("node types:", dict(kinds.most_common()))
    tenth = max(1, len(files) // 10)
    spread = Counter(i // tenth for i in misses_at)
    print("misses by tenth of the dumps:", [spread.get(t, 0) for t in range(10)])
    print("first dump's first 600 characters (to check this reading):")
    print(files[0].read_text(errors="replace")[:600])


if __name__ == "__main__":
    main()
