"""The self-test's verdict kept on disk (kernels/selftest_verdict.py): a load runs the checks
once per code, device, driver and MLX, never reuses another's verdict, and keeps no run
in which a check raised. No GPU needed: the runs are planted."""
from __future__ import annotations

import json

import pytest

from kernels import selftest, selftest_verdict
from kernels.backend import NAMES
from kernels.selftest_verdict import cached_selftest, verdict_key


def _results(failing: str | None = None, raised: bool = False) -> dict:
    out = {name: {"backend": "cuda", "max_abs_err": 0.0, "passed": True, "status": "pass",
                  "reason": None} for name in NAMES}
    if failing:
        reason = ("self-test raised RuntimeError: out of memory" if raised
                  else "self-test error 1.00e+00 > 2e-03")
        out[failing].update(passed=False, status="FAIL (disabled)", reason=reason)
    return out


class Runs:
    """A planted self-test that counts its runs."""

    def __init__(self, results: dict):
        self.results, self.count = results, 0

    def __call__(self) -> dict:
        self.count += 1
        return self.results


def test_a_second_load_reads_the_kept_verdict(tmp_path):
    run = Runs(_results(failing="moe_route"))
    first = cached_selftest(run, "cuda", tmp_path, key="k1")
    again = cached_selftest(run, "cuda", tmp_path, key="k1")
    assert run.count == 1
    assert again == first
    assert again["moe_route"]["passed"] is False        # a failure is kept too: it is a fact


def test_another_key_runs_the_checks_and_replaces_the_old_verdict(tmp_path):
    run = Runs(_results())
    cached_selftest(run, "cuda", tmp_path, key="k1")
    cached_selftest(run, "cuda", tmp_path, key="k2")
    assert run.count == 2
    kept = list(tmp_path.glob("selftest-*.json"))
    assert len(kept) == 1 and json.loads(kept[0].read_text())["key"] == "k2"


def test_a_run_in_which_a_check_raised_is_not_kept(tmp_path):
    run = Runs(_results(failing="paged_attention", raised=True))
    cached_selftest(run, "cuda", tmp_path, key="k1")
    cached_selftest(run, "cuda", tmp_path, key="k1")
    assert run.count == 2
    assert not list(tmp_path.glob("selftest-*.json"))


@pytest.mark.parametrize("content", ["{not json", '{"key": "k1"}', '{"key": "other", "results": {}}'])
def test_an_unreadable_or_foreign_file_costs_only_a_run(tmp_path, content):
    (tmp_path / "selftest-k1.json").write_text(content)
    run = Runs(_results())
    assert cached_selftest(run, "cuda", tmp_path, key="k1") == run.results
    assert run.count == 1


def test_an_unwritable_folder_costs_only_a_run(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    run = Runs(_results())
    assert cached_selftest(run, "cuda", blocker / "sub", key="k1") == run.results
    assert cached_selftest(run, "cuda", blocker / "sub", key="k1") == run.results
    assert run.count == 2


def test_the_key_follows_the_kernels_sources_the_backend_and_the_driver(tmp_path, monkeypatch):
    (tmp_path / "a.py").write_text("TOL = 2e-3\n")
    base = verdict_key("cuda", tmp_path)
    assert verdict_key("cuda", tmp_path) == base
    assert verdict_key("metal", tmp_path) != base
    (tmp_path / "a.py").write_text("TOL = 3e-3\n")
    changed = verdict_key("cuda", tmp_path)
    assert changed != base
    monkeypatch.setattr(selftest_verdict, "driver_version", lambda: "NVRM 999.1")
    assert verdict_key("cuda", tmp_path) != changed
    # the real tree: every kernel module counts
    assert verdict_key("cuda") != verdict_key("cuda", tmp_path)


def test_select_kernels_keeps_the_verdict_where_it_is_given(tmp_path, monkeypatch):
    """The engine's path: a GPU backend, the checks run once, the failing kernel off."""
    run = Runs(_results(failing="moe_route"))
    monkeypatch.setattr(selftest, "gpu_backend", lambda: "cuda")
    monkeypatch.setattr(selftest, "run_selftest", lambda verbose=False: run())
    first = selftest.select_kernels(True, tmp_path)
    second = selftest.select_kernels(True, tmp_path)
    assert run.count == 1
    assert first == second
    assert second.launches("moe_route") is None and second.launches("paged_attention") == "cuda"
    selftest.select_kernels(True)                      # no folder: the checks run
    assert run.count == 2
