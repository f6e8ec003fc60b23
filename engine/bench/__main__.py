"""``python -m engine.bench [options]``: decode and prefill speed, ours and mlx-lm's."""
from __future__ import annotations

import argparse
import sys

from engine.bench.suite import add_bench_args, run_bench


def main(argv: list[str] | None = None, prog: str = "python -m engine.bench") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    add_bench_args(parser)
    return run_bench(parser.parse_args(argv))


if __name__ == "__main__":
    import atexit

    from engine.core.mlx_threads import clear_thread_streams
    atexit.register(clear_thread_streams)
    sys.exit(main())
