import pytest

import kernels
from kernels import moe_grouped, selftest
from kernels.backend import NAMES, OFF_AT_LOAD, gpu_backend


def test_selftest_reports_every_kernel():
    results = kernels.run_selftest()
    assert set(results) == set(NAMES)
    for name, r in results.items():
        if gpu_backend() is None:
            assert r["status"].startswith("skipped")
        else:
            assert r["passed"], f"{name}: {r}"
    ks = kernels.select_kernels()
    status = ks.status()
    for name in NAMES:
        if name == moe_grouped.NAME and gpu_backend() is not None:
            # Passing is not enough for moe_grouped: it runs only where the engine measured
            # it faster at load (engine/loading/grouped_tune.py); this set was not measured.
            assert ks.launches(name) == gpu_backend()
            assert status[name].startswith("reference (not faster")
            continue
        if name in OFF_AT_LOAD and gpu_backend() is not None and ks.launches(name) is None:
            assert status[name] == f"reference ({OFF_AT_LOAD[name]})"   # unless turned on
            continue
        assert status[name] == (gpu_backend() or f"reference ({kernels.absent_reason()})")


def test_failing_check_turns_the_kernel_off(backend, monkeypatch):
    monkeypatch.setitem(selftest.CHECKS, "moe_route", lambda b: 1.0)   # planted failure
    results = selftest.run_selftest(verbose=False)
    assert results["moe_route"]["passed"] is False
    ks = selftest.kernel_set_from(results)
    assert ks.status()["moe_route"].startswith("reference (self-test error")
    assert ks.launches("moe_route") is None and ks.launches("paged_attention") == backend


def test_raising_check_turns_the_kernel_off(backend, monkeypatch):
    def boom(b):
        raise RuntimeError("does not compile")
    monkeypatch.setitem(selftest.CHECKS, "paged_attention", boom)
    ks = selftest.select_kernels()
    assert "does not compile" in ks.status()["paged_attention"]


def test_selection_from_planted_results_needs_no_gpu():
    """The set made from self-test results: passes launch, failures are off with why."""
    ok = {"backend": "cuda", "max_abs_err": 0.0, "passed": True, "status": "pass",
          "reason": None}
    results = {name: dict(ok) for name in NAMES}
    results["gated_delta_chunk"].update(passed=False, reason="self-test error 1.00e+00 > 2e-03")
    ks = selftest.kernel_set_from(results)
    assert ks.backend == "cuda"
    assert ks.launches("gated_delta_step") == "cuda"
    assert ks.launches("gated_delta_chunk") is None
    assert ks.status()["gated_delta_chunk"] == "reference (self-test error 1.00e+00 > 2e-03)"


def test_turned_off_in_settings():
    ks = kernels.select_kernels(use_kernels=False)
    assert all(v == "reference (turned off in settings)" for v in ks.status().values())
    assert all(ks.launches(name) is None for name in NAMES)


def test_unknown_kernel_or_backend_is_refused():
    with pytest.raises(ValueError):
        kernels.KernelSet("cuda", (("no_such_kernel", "x"),))
    with pytest.raises(ValueError):
        kernels.KernelSet("vulkan")


def test_kernels_named_in_the_environment_are_off_with_why(monkeypatch):
    """TANDEM_KERNELS_OFF: one kernel's before/after in one build, or a way around one."""
    ks = kernels.KernelSet("cuda", (("gated_delta_chunk", "self-test error"),))
    monkeypatch.setenv(selftest.OFF_VAR, "qmv_normed, gated_delta_chunk")
    off = selftest.turned_off(ks)
    assert off.launches("qmv_normed") is None and off.launches("paged_attention") == "cuda"
    assert off.status()["qmv_normed"] == "reference (turned off by TANDEM_KERNELS_OFF)"
    assert off.status()["gated_delta_chunk"] == "reference (self-test error)"   # kept
    monkeypatch.setenv(selftest.OFF_VAR, "")
    monkeypatch.setenv(selftest.ON_VAR, ",".join(OFF_AT_LOAD))
    assert selftest.turned_off(ks) == ks
    monkeypatch.setenv(selftest.OFF_VAR, "no_such_kernel")
    with pytest.raises(ValueError, match="TANDEM_KERNELS_OFF"):
        selftest.turned_off(ks)


def test_a_kernel_off_at_load_is_off_until_turned_on(monkeypatch):
    """kernels/backend.OFF_AT_LOAD: checked, but not timed or timed slower on a GPU."""
    monkeypatch.delenv(selftest.ON_VAR, raising=False)
    monkeypatch.delenv(selftest.OFF_VAR, raising=False)
    ks = kernels.KernelSet("cuda")
    for name in OFF_AT_LOAD:
        assert selftest.turned_off(ks).launches(name) is None
        assert selftest.turned_off(ks).status()[name] == f"reference ({OFF_AT_LOAD[name]})"
        monkeypatch.setenv(selftest.ON_VAR, name)
        assert selftest.turned_off(ks).launches(name) == "cuda"
        monkeypatch.setenv(selftest.OFF_VAR, name)              # off wins
        assert selftest.turned_off(ks).launches(name) is None
        monkeypatch.delenv(selftest.OFF_VAR)
