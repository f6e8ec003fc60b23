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
    assert line.startswith("# host: ") and " CPUs" in line and ", load average " in line
    assert "; device: " in line


def test_the_cpu_layout_names_numa_nodes_and_the_governor_where_linux_says(tmp_path):
    from engine.bench.host_info import cpu_layout
    for node in ("node0", "node1"):
        (tmp_path / "node" / node).mkdir(parents=True)
    (tmp_path / "node" / "possible").write_text("0-1\n")         # not a node
    freq = tmp_path / "cpu" / "cpu0" / "cpufreq"
    freq.mkdir(parents=True)
    (freq / "scaling_governor").write_text("powersave\n")
    assert cpu_layout(tmp_path) == ", 2 NUMA nodes, cpufreq powersave"
    assert cpu_layout(tmp_path / "absent") == ""                 # not Linux: nothing made up
