"""engine/bench/close_memory.py on the toy model: once closed and dropped, an engine
gives back what it held (other tests in the process may hold arrays of their own, so
this compares with the counts before and while open) and its Engine object is gone."""
import re

from engine.bench import close_memory


def test_a_closed_and_dropped_engine_gives_back_what_it_held(capsys):
    assert close_memory.main(["--model", "synthetic:qwen3.5-toy"]) == 0
    out = capsys.readouterr().out
    active = {k: float(v) for k, v in re.findall(r"^(.*?): (\d+\.\d+) GB active", out, re.M)}
    before, opened = active["before"], active["open"]
    assert opened > before                       # the toy's ~9 MB of weights and pool
    assert active["closed and dropped"] <= before + 0.25 * (opened - before)
    assert "the Engine object gone" in out
