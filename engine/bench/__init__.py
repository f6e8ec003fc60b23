"""Benchmarks and profilers: measuring tools, not part of the product.

Nothing in app/, engine/ or kernels/ imports this package (tests/test_layering.py
checks it) and the app bundle leaves it out (packaging/bundle_config.py). The one
way in from the product is ``python -m engine bench``, which engine/terminal/cli.py hands to
``python -m engine.bench`` only when that subcommand is chosen.

- ``python -m engine.bench`` (or ``python -m engine bench``): our engine against
  mlx-lm on the same weights (suite.py, runs.py, peer.py); ``--model synthetic:NAME``
  builds a full-size model with random weights here (synthetic.py) and serves it
  through ``Engine.from_model``.
- ``python -m engine.bench.profile_ops``: primitives per decode step, ours vs mlx-lm.
- ``python -m engine.bench.trace_cost``: what trace recording costs the engine thread.
- ``python -m engine.bench.disk_cache_ttft``: a resumed conversation's time to first
  token after a restart, with the disk prompt cache, from memory and without.
"""
