"""IOReport arithmetic on recorded fixtures; runs on any OS."""
import json
import sys
from pathlib import Path

import pytest

from engine.telemetry import ioreport_math as m

FIXTURES = Path(__file__).parent / "fixtures"


def load(name):
    return json.loads((FIXTURES / name).read_text())


TABLES = load("voltage_states9.json")


@pytest.mark.parametrize("chip", ["m2", "m3", "khz"])
def test_voltage_states9_parses_to_mhz_without_the_off_entry(chip):
    freqs = m.gpu_freqs_mhz(bytes.fromhex(TABLES[chip]["hex"]))
    assert freqs == pytest.approx(TABLES[chip]["expected_mhz"])


def test_voltage_states_pairs_are_frequency_then_voltage():
    pairs = m.parse_voltage_states(bytes.fromhex(TABLES["m2"]["hex"]))
    assert pairs[1] == (444_000_000, 590)
    assert len(pairs) == 9


def test_trailing_partial_entry_is_ignored():
    data = bytes.fromhex(TABLES["m2"]["hex"]) + b"\x01\x02\x03"
    assert len(m.gpu_freqs_mhz(data)) == 8


def test_empty_table_gives_no_frequencies():
    assert m.gpu_freqs_mhz(b"") == []
    assert m.gpu_freqs_mhz(bytes(8)) == []


@pytest.mark.parametrize("case", [k for k in load("gpuph_residency.json") if not k.startswith("_")])
def test_residency_weighted_mhz(case):
    fx = load("gpuph_residency.json")[case]
    freqs = m.gpu_freqs_mhz(bytes.fromhex(TABLES[fx["table"]]["hex"]))
    mhz, active, reason = m.weighted_mhz([tuple(s) for s in fx["states"]], freqs)
    assert reason == ""
    assert mhz == pytest.approx(fx["expected_mhz"])
    assert active == pytest.approx(fx["expected_active"])


def test_more_states_than_frequencies_is_reported_not_guessed():
    mhz, active, reason = m.weighted_mhz([("OFF", 1), ("P1", 1), ("P2", 1)], [400.0])
    assert mhz is None and active is None
    assert "voltage-states9" in reason


def test_no_residency_at_all_is_na():
    mhz, _, reason = m.weighted_mhz([("OFF", 0), ("P1", 0)], [400.0])
    assert mhz is None and reason


def test_weighting_catches_a_shifted_table():
    # Planted fault: pairing residencies with the table *including* its off
    # entry shifts every state down one frequency; the result must differ.
    fx = load("gpuph_residency.json")["m2_half_busy"]
    states = [tuple(s) for s in fx["states"]]
    wrong = [f / 1e6 for f, _ in m.parse_voltage_states(bytes.fromhex(TABLES["m2"]["hex"]))]
    mhz_wrong, _, _ = m.weighted_mhz(states, wrong)
    assert mhz_wrong != pytest.approx(fx["expected_mhz"])


@pytest.mark.parametrize("case", load("energy_deltas.json")["cases"])
def test_energy_delta_to_watts_for_each_unit(case):
    assert m.energy_watts(case["delta"], case["unit"], case["dt_s"]) == pytest.approx(
        case["expected_w"])


def test_unknown_energy_unit_raises():
    with pytest.raises(ValueError, match="unknown energy unit"):
        m.energy_watts(10, "kWh", 1.0)


def test_non_positive_interval_raises():
    with pytest.raises(ValueError):
        m.energy_watts(10, "mJ", 0.0)


def _sample_channels(fx):
    return [m.ChannelSample(c["group"], c["subgroup"], c["channel"], c["unit"],
                            value=c.get("value"),
                            states=tuple(tuple(s) for s in c["states"]) if "states" in c else None)
            for c in fx["channels"]]


def test_summarize_recorded_sample_uses_gpu_channels_only():
    fx = load("ioreport_sample.json")
    freqs = m.gpu_freqs_mhz(bytes.fromhex(TABLES[fx["table"]]["hex"]))
    s = m.summarize(_sample_channels(fx), freqs, fx["dt_s"])
    assert s.mhz == pytest.approx(fx["expected_mhz"])
    assert s.watts == pytest.approx(fx["expected_w"])
    assert s.active == pytest.approx(fx["expected_active"])
    assert "mJ" in s.power_note


def test_summarize_reports_missing_channels():
    s = m.summarize([], [400.0], 0.5)
    assert s.mhz is None and s.watts is None
    assert "GPUPH" in s.mhz_reason and "GPU Energy" in s.power_note


def test_summarize_bad_unit_degrades_power_only():
    ch = [m.ChannelSample("Energy Model", "", "GPU Energy", "furlongs", value=5)]
    s = m.summarize(ch, [400.0], 0.5)
    assert s.watts is None and "furlongs" in s.power_note


def test_ioreport_module_imports_anywhere_and_refuses_off_macos():
    from engine.telemetry import ioreport
    if sys.platform != "darwin":
        with pytest.raises(RuntimeError, match="macOS"):
            ioreport.IOReportSampler()
