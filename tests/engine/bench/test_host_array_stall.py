"""engine/bench/host_array_stall.py runs its two cases (on a CPU: nothing to move, so this
checks only that it runs; the question is the GPU's)."""
from engine.bench import host_array_stall


def test_both_cases_run_and_report(capsys):
    assert host_array_stall.main(["--busy-ms", "1", "--repeats", "1", "--size", "64"]) == 0
    out = capsys.readouterr().out
    assert "device buffer cached: making the host array" in out
    assert "cache empty: making the host array" in out
