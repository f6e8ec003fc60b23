import pytest

import kernels
from kernels import registry, selftest


def test_selftest_reports_every_kernel():
    results = kernels.run_selftest()
    assert set(results) == set(registry.NAMES)
    for name, r in results.items():
        if registry.gpu_backend() is None:
            assert r["status"].startswith("skipped")
        else:
            assert r["passed"], f"{name}: {r}"
            assert kernels.enabled()[name] == registry.gpu_backend()


def test_failing_check_disables_the_kernel(backend, monkeypatch):
    monkeypatch.setitem(selftest.CHECKS, "moe_route", lambda b: 1.0)   # planted failure
    results = selftest.run_selftest(verbose=False)
    assert results["moe_route"]["passed"] is False
    assert kernels.enabled()["moe_route"].startswith("reference (self-test error")


def test_raising_check_disables_the_kernel(backend, monkeypatch):
    def boom(b):
        raise RuntimeError("does not compile")
    monkeypatch.setitem(selftest.CHECKS, "paged_attention", boom)
    selftest.run_selftest(verbose=False)
    assert "does not compile" in kernels.enabled()["paged_attention"]


def test_disable_and_enabled_status():
    kernels.disable("moe_route", "broken on this GPU")
    assert kernels.enabled()["moe_route"] == "reference (broken on this GPU)"
    with pytest.raises(KeyError):
        kernels.disable("no_such_kernel", "x")
