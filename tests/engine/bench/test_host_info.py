"""engine/bench/host_info.py: the bench's host line names the CPU it ran on."""
import platform

from engine.bench.host_info import cpu_model, host_line

# the first lines of a /proc/cpuinfo
CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model name\t: Intel(R) Xeon(R) Platinum 8480+
stepping\t: 8
"""


def test_the_cpu_is_named_from_cpuinfo(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO)
    assert cpu_model(path) == "Intel(R) Xeon(R) Platinum 8480+"


def test_without_cpuinfo_some_name_is_given(tmp_path):
    name = cpu_model(tmp_path / "absent")
    assert name and (platform.system() == "Darwin" or name == (platform.processor()
                                                               or "unknown CPU"))


def test_the_host_line_names_cpus_and_device():
    line = host_line()
    assert line.startswith("# host: ") and " CPUs, load average " in line and "; device: " in line
