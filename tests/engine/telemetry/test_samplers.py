"""NVML and CPU samplers behind fakes, and make_sampler()'s choice."""
import sys
import types

import pytest

from engine.telemetry import gpu
from engine.telemetry.cpu import CpuSampler
from engine.telemetry.nvml import NvmlSampler
from engine.telemetry.reading import Reading


class FakeNVMLError(Exception):
    pass


def fake_pynvml(*, energy=True, power=True, average=True, devices=1, sm_mhz=1980):
    """A stand-in for the pynvml module with a controllable energy counter."""
    mod = types.ModuleType("pynvml")
    mod.NVML_CLOCK_SM = 1
    mod.NVML_FI_DEV_POWER_AVERAGE = 185
    mod.NVMLError = FakeNVMLError
    state = {"energy_mj": 1_000_000, "init": 0, "shutdown": 0}
    mod.state = state

    def unsupported(*_a):
        raise FakeNVMLError("Not Supported")

    mod.nvmlInit = lambda: state.__setitem__("init", state["init"] + 1)
    mod.nvmlShutdown = lambda: state.__setitem__("shutdown", state["shutdown"] + 1)
    mod.nvmlDeviceGetCount = lambda: devices
    mod.nvmlDeviceGetHandleByIndex = lambda i: ("handle", i)
    mod.nvmlDeviceGetName = lambda h: b"NVIDIA H200"
    mod.nvmlDeviceGetClockInfo = lambda h, clock: sm_mhz if clock == 1 else 0
    mod.nvmlDeviceGetTotalEnergyConsumption = (
        (lambda h: state["energy_mj"]) if energy else unsupported)
    mod.nvmlDeviceGetPowerUsage = (lambda h: 350_000) if power else unsupported

    def field_values(h, ids):
        assert ids == [185]
        value = types.SimpleNamespace(uiVal=300_000)
        return [types.SimpleNamespace(nvmlReturn=0, valueType=1, value=value)]
    mod.nvmlDeviceGetFieldValues = field_values if average else unsupported
    return mod


def test_nvml_sm_clock_and_energy_delta_watts(monkeypatch):
    nv = fake_pynvml()
    clock = iter([100.0, 100.5, 101.5])
    monkeypatch.setattr("engine.telemetry.nvml.time.perf_counter", lambda: next(clock))
    s = NvmlSampler(nvml=nv)
    first = s.read()
    # No previous counter value yet: falls back to the instantaneous reading.
    assert first.gpu_watts == pytest.approx(350.0)
    assert "instantaneous" in first.power_note
    nv.state["energy_mj"] += 200_000          # 200 J over 0.5 s
    second = s.read()
    assert second.gpu_watts == pytest.approx(400.0)
    assert second.power_note == "energy counter delta"
    assert second.gpu_mhz == 1980.0
    assert (second.source, second.mhz_label) == ("NVML", "SM clock MHz")
    nv.state["energy_mj"] += 100_000          # 100 J over 1.0 s
    assert s.read().gpu_watts == pytest.approx(100.0)


def test_nvml_counter_reset_is_not_a_negative_power(monkeypatch):
    nv = fake_pynvml()
    s = NvmlSampler(nvml=nv)
    s.read()
    nv.state["energy_mj"] = 5
    r = s.read()
    assert r.gpu_watts == pytest.approx(350.0) and "instantaneous" in r.power_note


def test_nvml_without_energy_counter_uses_power_usage():
    s = NvmlSampler(nvml=fake_pynvml(energy=False))
    s.read()
    r2 = s.read()
    assert r2.gpu_watts == pytest.approx(350.0)
    assert "nvmlDeviceGetPowerUsage" in r2.power_note


def test_nvml_falls_back_to_average_power_field():
    s = NvmlSampler(nvml=fake_pynvml(energy=False, power=False))
    r = s.read()
    assert r.gpu_watts == pytest.approx(300.0)
    assert "AVERAGE" in r.power_note


def test_nvml_without_any_power_says_why():
    s = NvmlSampler(nvml=fake_pynvml(energy=False, power=False, average=False))
    r = s.read()
    assert r.gpu_watts is None and r.watts_text == "n/a"
    assert r.power_note.startswith("n/a") and "Not Supported" in r.power_note
    assert r.gpu_mhz == 1980.0


def test_nvml_no_device_raises_and_shuts_down():
    nv = fake_pynvml(devices=0)
    with pytest.raises(RuntimeError, match="0 GPU"):
        NvmlSampler(nvml=nv)
    assert nv.state["shutdown"] == 1


def test_nvml_close_is_idempotent():
    nv = fake_pynvml()
    s = NvmlSampler(nvml=nv)
    s.close()
    s.close()
    assert nv.state["shutdown"] == 1


def make_sysfs(root, khz_per_cpu):
    for i, khz in enumerate(khz_per_cpu):
        d = root / f"sys/devices/system/cpu/cpu{i}/cpufreq"
        d.mkdir(parents=True)
        (d / "scaling_cur_freq").write_text(f"{khz}\n")


def test_cpu_sampler_averages_cpufreq(tmp_path):
    make_sysfs(tmp_path, [2_000_000, 3_000_000, 2_500_000, 2_500_000])
    s = CpuSampler(root=tmp_path, platform="linux")
    r = s.read()
    assert r.gpu_mhz == pytest.approx(2500.0)
    assert (r.source, r.mhz_label) == ("cpufreq", "CPU MHz")
    assert r.gpu_watts is None and r.power_note.startswith("n/a")


def test_cpu_sampler_follows_frequency_changes(tmp_path):
    make_sysfs(tmp_path, [1_000_000])
    s = CpuSampler(root=tmp_path, platform="linux")
    (tmp_path / "sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq").write_text("1800000")
    assert s.read().gpu_mhz == pytest.approx(1800.0)


def test_cpu_sampler_falls_back_to_proc_cpuinfo(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text(
        "processor\t: 0\ncpu MHz\t\t: 2400.000\n\nprocessor\t: 1\ncpu MHz\t\t: 2600.000\n")
    r = CpuSampler(root=tmp_path, platform="linux").read()
    assert r.gpu_mhz == pytest.approx(2500.0) and r.source == "procfs"


def test_cpu_sampler_on_mac_uses_sysctl():
    r = CpuSampler(platform="darwin", sysctl=lambda name: 3_200_000_000).read()
    assert r.gpu_mhz == pytest.approx(3200.0) and r.source == "sysctl"


def test_cpu_sampler_without_any_source_raises(tmp_path):
    with pytest.raises(RuntimeError):
        CpuSampler(root=tmp_path, platform="linux")
    with pytest.raises(RuntimeError):
        CpuSampler(platform="darwin", sysctl=lambda name: None)


def test_make_sampler_prefers_nvml_on_linux(monkeypatch):
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    s = gpu.make_sampler()
    assert isinstance(s, NvmlSampler)
    assert isinstance(s, gpu.Sampler)


def test_make_sampler_falls_back_to_cpu_with_the_reason(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setitem(sys.modules, "pynvml", None)     # "not installed"
    s = gpu.make_sampler()
    if isinstance(s, gpu.NullSampler):                   # a machine with no cpufreq or procfs
        assert "nvml" in s.read().reason
        return
    r = s.read()
    assert r.mhz_label == "CPU MHz" and r.gpu_watts is None
    assert "nvml" in r.power_note


@pytest.mark.skipif(sys.platform == "darwin", reason="a real Mac has IOReport")
def test_make_sampler_on_mac_without_ioreport_degrades(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    s = gpu.make_sampler()
    r = s.read()
    assert isinstance(r, Reading)
    # Here neither IOReport nor hw.cpufrequency exist: n/a with both reasons.
    assert r.gpu_mhz is None and "ioreport" in r.reason


def test_make_sampler_rejects_unknown_preference():
    with pytest.raises(ValueError):
        gpu.make_sampler(prefer="tpu")
