"""When each kernel module of a cold start was compiled, read from MLX's kernel cache afterwards.

    python3 -m engine.bench.ptx_timeline DIR [--since EPOCH_SECONDS]

MLX (and kernels/kernel_seeding.py, and engine/loading/mlx_prewarm.py's workers) write a
module's files once its compile is done, so the modification times of DIR's .ptx files
say when each finished. Run after a start on an empty DIR (MLX_PTX_CACHE_DIR=DIR):
each module in the order it finished, the seconds since the one before (or since
--since: `date +%s.%N` printed before the start), and the seconds and module counts by
family (MLX's quantized-matmul tiles, gathers, scatters, fused elementwise graphs;
Tandem's kernels). The gaps are upper bounds on each compile where one process compiles
one module at a time; with workers compiling at once they overlap. (Issue 23, item 5.)
"""
from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

FAMILIES = (("custom_kernel_", "Tandem's kernels"), ("qmm_", "quantized matmul tiles"),
            ("gather_axis", "gather_axis"), ("gather_", "gathers"), ("scatter", "scatters"))


def family(module: str) -> str:
    for prefix, name in FAMILIES:
        if module.startswith(prefix):
            return name
    return "fused elementwise and other"


def timeline(folder: Path, since: float | None = None) -> list[tuple[float, float, int, str]]:
    """(finished at, seconds since the one before, bytes, module), oldest first; the work
    folders of mlx_prewarm's workers (hidden) are left out."""
    found = sorted((p.stat().st_mtime, p.stat().st_size, str(p.relative_to(folder))[:-4])
                   for p in folder.rglob("*.ptx")
                   if not any(part.startswith(".") for part in p.relative_to(folder).parts))
    out, before = [], since if since is not None else (found[0][0] if found else 0.0)
    for t, size, module in found:
        out.append((t, t - before, size, module))
        before = t
    return out


def report(rows: list[tuple[float, float, int, str]], since: float | None) -> str:
    lines, seconds, counts = [], Counter(), Counter()
    for t, gap, size, module in rows:
        fam = family(module)
        seconds[fam] += gap
        counts[fam] += 1
        at = f"{t - since:7.1f}" if since is not None else f"{t:.1f}"
        lines.append(f"{at} s  +{gap:6.1f} s  {size / 1e6:5.2f} MB  {module[:110]}")
    lines.append("by family (gaps summed):")
    lines += [f"  {fam}: {counts[fam]} modules, {seconds[fam]:.1f} s"
              for fam in sorted(seconds, key=lambda f: -seconds[f])]
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--since", type=float, default=None, help="epoch seconds the start began")
    args = ap.parse_args(argv)
    print(report(timeline(args.folder, args.since), args.since))


if __name__ == "__main__":
    main()
