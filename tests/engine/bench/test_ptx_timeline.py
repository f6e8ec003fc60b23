"""engine.bench.ptx_timeline: modules in the order their files were written, with the gaps."""
import os

from engine.bench.ptx_timeline import family, report, timeline


def _module(folder, name, at, size=10):
    path = folder / (name + ".ptx")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    os.utime(path, (at, at))


def test_modules_come_in_the_order_they_finished_with_the_gap_before_each(tmp_path):
    _module(tmp_path, "qmm_sm80_tn_bfloat16_m64_b4_g64_affine", 1030.0)
    _module(tmp_path, "gather_bfloat16_int32_1", 1005.0)
    _module(tmp_path, "custom_kernel_tandem_x_1/long/part", 1040.0)
    _module(tmp_path, ".tandem-prewarm/1-0/qmm_sm80_tn_bfloat16_m16_b4_g64_affine", 1001.0)
    rows = timeline(tmp_path, since=1000.0)
    assert [(gap, module) for _, gap, _, module in rows] == [
        (5.0, "gather_bfloat16_int32_1"), (25.0, "qmm_sm80_tn_bfloat16_m64_b4_g64_affine"),
        (10.0, "custom_kernel_tandem_x_1/long/part")]
    text = report(rows, 1000.0)
    assert "quantized matmul tiles: 1 modules, 25.0 s" in text
    assert "Tandem's kernels: 1 modules, 10.0 s" in text


def test_each_module_has_its_family():
    assert family("gather_axis_float32_int32") == "gather_axis"
    assert family("scatter_bfloat16_int32_Assign_1") == "scatters"
    assert family("CV2ISigmoidBDV2IBroadcastACEV2I_VV_1") == "fused elementwise and other"
