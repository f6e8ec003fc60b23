"""NVIDIA sampler through NVML (package nvidia-ml-py, imported as pynvml; optional).

MHz is the measured SM clock. Watts prefer the total-energy counter (mJ since
the driver loaded) differenced over real time, because it integrates every
millisecond of the interval; the instantaneous and averaged power readings
are fallbacks for GPUs without the counter (pre-Volta) and for the first
sample, which has nothing to difference against.
"""
from __future__ import annotations

import importlib
import time
from types import ModuleType

from engine.telemetry.reading import Reading

SOURCE = "NVML"
MHZ_LABEL = "SM clock MHz"


class NvmlSampler:
    """One NVIDIA GPU, by NVML index."""
    source = SOURCE
    mhz_label = MHZ_LABEL

    def __init__(self, index: int = 0, nvml: ModuleType | None = None) -> None:
        # Raises ImportError or the NVML error when there is no usable GPU;
        # make_sampler() catches that and falls back.
        self._nvml = nvml if nvml is not None else importlib.import_module("pynvml")
        self._nvml.nvmlInit()
        try:
            count = self._nvml.nvmlDeviceGetCount()
            if index >= count:
                raise RuntimeError(f"NVML sees {count} GPU(s); index {index} is out of range")
            self._handle = self._nvml.nvmlDeviceGetHandleByIndex(index)
        except Exception:  # release NVML whatever failed, then re-raise
            self._nvml.nvmlShutdown()
            raise
        self.index = index
        try:
            self.device_name = _decode(self._nvml.nvmlDeviceGetName(self._handle))
        except Exception:  # noqa: BLE001
            self.device_name = ""
        self._energy_ok = True               # cleared once the counter proves unsupported
        self._prev_energy: tuple[float, int] | None = None   # (t, mJ)
        self._closed = False

    def read(self) -> Reading:
        t = time.perf_counter()
        try:
            mhz, reason = float(self._nvml.nvmlDeviceGetClockInfo(
                self._handle, self._nvml.NVML_CLOCK_SM)), ""
        except Exception as exc:  # noqa: BLE001
            mhz, reason = None, f"nvmlDeviceGetClockInfo: {exc}"
        watts, note = self._watts(t)
        return Reading(t=t, gpu_mhz=mhz, gpu_watts=watts, mhz_label=MHZ_LABEL,
                       source=SOURCE, power_note=note, reason=reason)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001, S110
                pass    # shutting down twice or after a driver reset is harmless

    def _watts(self, t: float) -> tuple[float | None, str]:
        from_energy = self._energy_watts(t)
        if from_energy is not None:
            return from_energy, "energy counter delta"
        failures = []
        try:
            return self._nvml.nvmlDeviceGetPowerUsage(self._handle) / 1000.0, \
                "instantaneous power (nvmlDeviceGetPowerUsage)"
        except Exception as exc:  # noqa: BLE001
            failures.append(f"nvmlDeviceGetPowerUsage: {exc}")
        try:
            return self._average_power_w(), "average power (NVML_FI_DEV_POWER_AVERAGE)"
        except Exception as exc:  # noqa: BLE001
            failures.append(f"power average field: {exc}")
        return None, "n/a: " + "; ".join(failures)

    def _energy_watts(self, t: float) -> float | None:
        if not self._energy_ok:
            return None
        try:
            mj = int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))
        except Exception:  # noqa: BLE001
            self._energy_ok = False          # not supported: stop asking every sample
            return None
        prev, self._prev_energy = self._prev_energy, (t, mj)
        if prev is None or t <= prev[0] or mj < prev[1]:
            return None    # first sample, or the counter reset (driver reload)
        return (mj - prev[1]) / 1000.0 / (t - prev[0])

    def _average_power_w(self) -> float:
        field_id = getattr(self._nvml, "NVML_FI_DEV_POWER_AVERAGE", None)
        if field_id is None:
            raise RuntimeError("this pynvml has no NVML_FI_DEV_POWER_AVERAGE")
        (value,) = self._nvml.nvmlDeviceGetFieldValues(self._handle, [field_id])
        if getattr(value, "nvmlReturn", 0) != 0:
            raise RuntimeError(f"NVML return code {value.nvmlReturn}")
        return _field_number(value) / 1000.0      # mW


def _field_number(value) -> float:
    """The number inside an nvmlFieldValue_t, whatever member its type selects."""
    # nvmlValueType_t: 0 double, 1 uint, 2 ulong, 3 ulonglong, 4 slonglong, 5 sint, 6 ushort
    members = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal",
               6: "usVal"}
    member = members.get(getattr(value, "valueType", 1), "uiVal")
    return float(getattr(value.value, member))


def _decode(name) -> str:
    return name.decode() if isinstance(name, bytes) else str(name)
