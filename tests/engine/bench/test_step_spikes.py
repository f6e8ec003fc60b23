"""engine.bench.step_spikes: a decode run's slow steps from `engine bench --steps-log`,
and how far each began from the GPU machine's nvidia-smi polls."""
import json

from engine.bench import step_spikes


def _step(clock, ms, queue=5.0, cpu=5.0, read=0.1, samples=0):
    return {"clock": clock, "ms": ms, "queue_ms": queue, "queue_cpu_ms": cpu,
            "read_ms": read, "samples": samples}


def test_a_slow_step_is_named_with_its_split_and_its_distance_from_a_poll(tmp_path, capsys):
    run = {"run": 3, "engine": "tandem", "what": "decode", "size": 16,
           "steps": [_step("18:00:00.000", 10.0), _step("18:00:00.010", 10.2),
                     _step("18:00:00.020", 23.0, queue=18.0, cpu=17.5, samples=1),
                     _step("18:00:00.043", 9.8)]}
    log = tmp_path / "steps.jsonl"
    log.write_text(json.dumps(run) + "\n")
    polls = tmp_path / "gpu.csv"
    polls.write_text("2026/12/06 17:59:55.020, 1980 MHz, 300.0 W, 90 %, 1 MiB\n"
                     "2026/12/06 18:00:00.030, 1980 MHz, 300.0 W, 90 %, 1 MiB\n")
    step_spikes.main([str(log), "--polls", str(polls)])
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("1 decode runs, 1 with a step over 2.0x the median")
    got = json.loads(out[1])
    assert got["median_ms"] == 10.1 and got["slowest_x"] == 2.28
    assert got["slow"] == [{"at": 2, "x": 2.28, "ms": 23.0, "queue_ms": 18.0,
                            "queue_cpu_ms": 17.5, "read_ms": 0.1, "prev_read_ms": 0.1,
                            "samples": 1, "from_poll_ms": -10.0}]
    assert got["steps_near_a_poll"] == "4/4"


def test_without_polls_or_slow_steps_nothing_is_made_up():
    run = {"run": 0, "size": 1, "steps": [_step("01:02:03.004", 5.0), _step("01:02:03.009", 6.0)]}
    got = step_spikes.spikes(run, 2.0, [])
    assert got == {"run": 0, "size": 1, "median_ms": 5.5, "slowest_x": 1.09, "slow": []}
    assert step_spikes.seconds_of_day("01:02:03.004") == 3723.004
    assert step_spikes.nearest_ms(10.0, []) is None


def test_a_slow_step_keeps_what_the_engine_thread_ran_within_it():
    """`engine bench --stacks` logs a slow step's stacks: the listing passes them on."""
    stacks = {"samples": 12, "room": 23, "longest_gap_ms": 9.0,
              "stacks": [{"n": 12, "stack": "_run (step_loop.py:245)"}]}
    run = {"run": 0, "size": 16, "steps": [_step("01:00:00.000", 8.0), _step("01:00:00.008", 8.2),
                                           {**_step("01:00:00.016", 23.0), "stacks": stacks}]}
    got = step_spikes.spikes(run, 2.0, [])
    assert [s.get("stacks") for s in got["slow"]] == [stacks]


def test_a_slow_first_steady_step_comes_with_the_steps_the_rows_joined_in():
    lead_in = [{"kind": "prefill", "rows": 0, "prompt_tokens": 512, "clock": "01:00:00.000",
                "ms": 90.0, "queue_ms": 4.0, "queue_cpu_ms": 4.0, "read_ms": 80.0}]
    first_slow = {"run": 1, "size": 16, "lead_in": lead_in,
                  "steps": [_step("01:00:00.090", 21.0), _step("01:00:00.111", 8.0),
                            _step("01:00:00.119", 8.4)]}
    got = step_spikes.spikes(first_slow, 2.0, [])
    assert got["lead_in"] == [{"kind": "prefill", "rows": 0, "prompt_tokens": 512, "ms": 90.0,
                               "queue_ms": 4.0, "read_ms": 80.0}]
    later_slow = {**first_slow, "steps": [_step("01:00:00.090", 8.0), _step("01:00:00.098", 21.0),
                                          _step("01:00:00.119", 8.4)]}
    assert "lead_in" not in step_spikes.spikes(later_slow, 2.0, [])
