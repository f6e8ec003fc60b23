"""The bench's kernel-tuning flags (engine/bench/runs.py add_moe_max_pairs_arg): each sets
its kernels/ constant before a model is built, and no flag leaves the defaults alone."""
import argparse

import engine.core.pool_scatters as ps
import kernels.moe_experts as me
import kernels.qmm_rows as qr
from engine.bench.runs import add_moe_max_pairs_arg, apply_moe_max_pairs


def _apply(argv, monkeypatch):
    for name in ("STAGED", "STAGED_DOWN", "TILE_MAJOR", "DEDUPE_FROM_PAIRS", "RPW1", "RPW2"):
        monkeypatch.setattr(me, name, getattr(me, name))      # restored after the test
    monkeypatch.setattr(qr, "LAYOUT", qr.LAYOUT)
    monkeypatch.setattr(ps, "WAITS", ps.WAITS)
    parser = argparse.ArgumentParser()
    add_moe_max_pairs_arg(parser)
    apply_moe_max_pairs(parser.parse_args(argv))


def test_no_flag_keeps_the_defaults(monkeypatch):
    before = (me.STAGED, me.STAGED_DOWN, me.TILE_MAJOR, qr.LAYOUT, ps.WAITS)
    _apply([], monkeypatch)
    assert (me.STAGED, me.STAGED_DOWN, me.TILE_MAJOR, qr.LAYOUT, ps.WAITS) == before


def test_each_flag_sets_its_constant(monkeypatch):
    _apply(["--moe-staged", "--moe-staged-down", "--moe-pair-major", "--qmm-layout",
            "uniform", "--moe-dedupe-from", "16", "--moe-rows", "4/2", "--no-pool-waits"],
           monkeypatch)
    assert (me.STAGED, me.STAGED_DOWN, me.TILE_MAJOR) == (True, True, False)
    assert (qr.LAYOUT, me.DEDUPE_FROM_PAIRS, me.RPW1, me.RPW2) == ("uniform", 16, 4, 2)
    assert ps.WAITS is False
