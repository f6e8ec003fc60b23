"""The tables ``profile_ops --chunk`` prints: a prompt chunk's ops in total, per layer
block and per part of a layer (engine/bench/chunk_ops.py counts them)."""
from __future__ import annotations

from collections import Counter

from engine.bench.chunk_ops import VARIANTS, chunk_ops

BLOCK, FULL = 4, 40           # the Qwen3.5 layout: full attention every 4th of 40 layers
PARTS = ("linear attention", "full attention", "MoE block", "norms")


def _layout(num_layers: int) -> dict:
    from engine.bench.profile_ops import qwen3_5_layout
    return qwen3_5_layout(num_layers)


def print_chunks(lengths, path: str, by_primitive: bool, decode_ops) -> None:
    print(f"ops (views excluded; a stand-in kernel is one launch) of one prefill forward "
          f"of one row, {FULL} layers (30 Gated DeltaNet + 10 gated attention, MoE), "
          f"{path} path, uncompiled as the step loop runs it beside a decode")
    print(f"| chunk tokens | variant | ops per forward | per {BLOCK}-layer block "
          "| outside the layers | of the forward: Contiguous |")
    print("|---|---|---|---|---|---|")
    for T in lengths:
        for variant in VARIANTS:
            n1, n2 = (chunk_ops(_layout(n), T, variant, path) for n in (BLOCK, 2 * BLOCK))
            full = chunk_ops(_layout(FULL), T, variant, path)
            block = sum(n2.values()) - sum(n1.values())
            print(f"| {T} | {variant} | {sum(full.values())} | {block} "
                  f"| {sum(n1.values()) - block} | {full['Contiguous']} |", flush=True)
    print(f"\nfor comparison, one compiled decode step (B=1) on this path: "
          f"{decode_ops(path)} ops")
    parts = {T: chunk_ops(_layout(FULL), T, "later", path, by_part=True) for T in lengths}
    _print_parts(lengths, parts)
    if by_primitive:
        _print_part_primitives(lengths, parts)


def _print_parts(lengths, parts) -> None:
    print("\nby part, a later chunk (per call: the last layer's; the first attention layer "
          "also builds the forward's key index)")
    head = " | ".join(f"T={T}: per call | T={T}: in the forward" for T in lengths)
    print(f"| part | calls | {head} |\n|---|---|" + "---|---|" * len(lengths))
    for part in PARTS:
        calls = parts[lengths[0]][2][part]
        cells = " | ".join(f"{sum(parts[T][3][part].values())} | {sum(parts[T][1][part].values())}"
                           for T in lengths)
        print(f"| {part} | {calls} | {cells} |")
    cells = " | ".join(f"- | {_rest(parts[T])}" for T in lengths)
    print(f"| the rest (embedding, head, per-forward arrays) | - | {cells} |")


def _rest(counted) -> int:
    total, by_part = counted[0], counted[1]
    return sum(total.values()) - sum(sum(c.values()) for c in by_part.values())


def _print_part_primitives(lengths, parts) -> None:
    for part in PARTS:
        last = {T: parts[T][3][part] for T in lengths}
        names = sorted(set().union(*last.values()), key=lambda n: -max(c[n] for c in last.values()))
        print(f"\n{part}, one call by primitive ([name]: a stand-in launch)")
        print("| primitive | " + " | ".join(f"T={T}" for T in lengths) + " |")
        print("|---|" + "---|" * len(lengths))
        for name in names:
            print(f"| {name} | " + " | ".join(str(last[T][name]) for T in lengths) + " |")
    rest = {T: _rest_by_primitive(parts[T]) for T in lengths}
    names = sorted(set().union(*rest.values()), key=lambda n: -max(c[n] for c in rest.values()))
    print("\nthe rest, by primitive")
    print("| primitive | " + " | ".join(f"T={T}" for T in lengths) + " |")
    print("|---|" + "---|" * len(lengths))
    for name in names:
        print(f"| {name} | " + " | ".join(str(rest[T][name]) for T in lengths) + " |")


def _rest_by_primitive(counted) -> Counter:
    rest = Counter(counted[0])
    for c in counted[1].values():
        rest.subtract(c)
    return +rest
