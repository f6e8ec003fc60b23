"""engine.bench.gpu_busy: the GPU's busy share from kernel intervals (the union, clipped to
the run's middle half), checked on hand-made timelines."""
import pytest

from engine.bench import gpu_busy


def test_overlapping_kernels_count_once_and_gaps_do_not_count():
    # 0-4 and 2-6 overlap (6 covered), 8-9 one more; the window is 0-10
    assert gpu_busy.busy_fraction([(2, 6), (0, 4), (8, 9)], 0, 10) == pytest.approx(0.7)


def test_kernels_are_clipped_to_the_window():
    assert gpu_busy.busy_fraction([(-5, 2), (9, 20)], 0, 10) == pytest.approx(0.3)
    assert gpu_busy.busy_fraction([(1, 2)], 5, 5) == 0.0


def test_a_kernel_inside_another_adds_nothing():
    assert gpu_busy.busy_fraction([(0, 10), (2, 3), (4, 5)], 0, 10) == pytest.approx(1.0)


def test_the_summary_reads_the_middle_half_of_the_run():
    # a long lead-in kernel (the prompts) at the start, then a kernel every 1 ms
    # for 0.5 ms: the middle half is steady decode, busy half the time
    intervals = [(0.0, 1000.0)] + [(1000.0 + 1000 * i, 1500.0 + 1000 * i) for i in range(7)]
    got = gpu_busy.summary(intervals)
    assert got["window_ms"] == 3.8            # the span 0-7500 us: its middle half, 3.75 ms
    assert got["busy"] == pytest.approx(0.5, abs=0.07)
    assert got["kernels_per_ms"] == pytest.approx(1.0, abs=0.3)


def test_the_plain_share_is_the_kernels_busy_time_over_the_plain_step():
    # profiled: 50 % of a 10 ms step busy (5 ms of kernels); the plain step takes 6 ms
    got = gpu_busy.plain_share(0.5, 0.010, 0.006)
    assert got == {"busy_ms_per_step": 5.0, "busy_plain": pytest.approx(0.833, abs=1e-3)}
    assert gpu_busy.plain_share(0.9, 0.010, 0.005)["busy_plain"] == 1.0    # at most all


def test_without_torch_it_says_so_and_stops(monkeypatch, capsys):
    import builtins
    real_import = builtins.__import__

    def no_torch(name, *args, **kwargs):
        if name.startswith("torch"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_torch)
    assert gpu_busy.main(["--batch", "1"]) == 0
    assert "no torch" in capsys.readouterr().out


def test_it_drives_the_engine_and_prints_a_row_per_run(monkeypatch, capsys):
    """The whole path on the toy model, with a stand-in profiler that reports one kernel
    a millisecond for 0.8 ms (the GPU machine's torch is not here)."""
    import sys
    import types

    class Event:
        device_type = "DeviceType.CUDA"

        def __init__(self, s, e):
            self.time_range = types.SimpleNamespace(start=s, end=e)

    class Profile:
        def __init__(self, activities):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def events(self):
            return [Event(1000.0 * i, 1000.0 * i + 800) for i in range(40)]

    fake = types.ModuleType("torch.profiler")
    fake.ProfilerActivity, fake.profile = types.SimpleNamespace(CUDA="cuda"), Profile
    monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))
    monkeypatch.setitem(sys.modules, "torch.profiler", fake)
    assert gpu_busy.main(["--model", "synthetic:qwen3.5-toy", "--batch", "1,2",
                          "--steps", "6", "--rounds", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert len(rows) == 2 and "'B': 2" in rows[1]
    assert "'busy': 0.8" in rows[0] and "'steps': 6" in rows[0]
    assert "'plain_step_ms'" in rows[0] and "'busy_plain'" in rows[0]
