"""The benches' start line: the kernels' self-test timed apart (it compiled for ~62 s of
every H200 start until its verdict was kept: kernels/selftest_verdict.py)."""
from engine.bench.engine_start import self_test_s, warm_up_compiles, warm_up_steps


def test_the_self_test_is_timed_from_its_message_to_the_next():
    steps = [(0.0, "Reading the tokenizer"), (1.0, "Checking kernels"),
             (63.5, "Compiling kernels: decode, batch of 1"), (70.0, "Ready")]
    assert self_test_s(steps) == 62.5


def test_a_load_without_the_message_reports_no_self_test():
    assert self_test_s([(0.0, "Ready")]) == 0.0
    assert self_test_s([(0.0, "Checking kernels")]) == 0.0     # nothing after it


def test_each_load_time_warm_up_step_is_named_with_its_seconds():
    steps = [(0.0, "Checking kernels"), (10.0, "Compiling kernels: decode 1 (1/3)"),
             (40.5, "Compiling kernels: prefill 16 (2/3)"),
             (41.0, "Compiling kernels: the sampler")]
    assert warm_up_steps(steps, 43.0) == ("decode 1 (1/3) 30.5 s, prefill 16 (2/3) 0.5 s, "
                                          "the sampler 2.0 s")


def test_each_warm_up_step_names_the_kernels_mlx_compiled_during_it():
    steps = [(0.0, "Checking kernels"), (10.0, "Compiling kernels: decode 1 (1/3)"),
             (40.5, "Compiling kernels: prefill 16 (2/3)"),
             (41.0, "Compiling kernels: the sampler")]
    cached = [set(), {"a"}, {"a", "qmm_16", "fused_1"}, {"a", "qmm_16", "fused_1"},
              {"a", "qmm_16", "fused_1", "sort_1"}]          # the last one: at Ready
    assert warm_up_compiles(steps, cached) == ("decode 1 (1/3): 2 (fused_1, qmm_16); "
                                               "the sampler: 1 (sort_1)")
    assert warm_up_compiles(steps, cached, most=1).startswith(
        "decode 1 (1/3): 2 (fused_1 and 1 more)")
    assert warm_up_compiles(steps, [set()] * 5) == ""                  # a warm cache


def test_the_start_names_the_kernels_that_do_not_launch():
    from engine.bench.engine_start import kernels_off_line
    from kernels.kernel_set import KernelSet
    ks = KernelSet("cuda", (("qmv_normed", "turned off by TANDEM_KERNELS_OFF"),))
    line = kernels_off_line(ks.status())
    assert line.startswith("kernels not launching: ")
    assert "qmv_normed reference (turned off by TANDEM_KERNELS_OFF)" in line
    assert "qmv_normed" not in kernels_off_line(KernelSet("cuda").status())
    assert kernels_off_line(KernelSet.plain("no GPU").status()) is None
