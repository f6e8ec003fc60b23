"""The one dispatch layer: a kernel only where it is on and the shapes fit, else None
(the model's plain path). Runs without a GPU: a set claiming a backend must decline
before launching anything when the shapes are outside the kernel's contract."""
import kernel_gdn_cases as gdn_cases
import mlx.core as mx
import pytest

import kernels.gated_delta_chunk as gdc
import kernels.gated_delta_step as gds
import kernels.moe_route as mr
import kernels.paged_attention as pa
from kernels.backend import CUDA_ONLY
from kernels.kernel_set import NO_KERNELS, KernelSet


def _step_args(m, pool=None):
    return (m["q"][:, 0], m["k"][:, 0], m["v"][:, 0], m["g"][:, 0], m["beta"][:, 0],
            m["pool"] if pool is None else pool, m["slots"], m["fresh"])


def _chunk_args(m, pool=None):
    return (m["q"], m["k"], m["v"], m["g"], m["beta"], m["pool"] if pool is None else pool,
            m["slots"], m["lengths"], m["fresh"])


def _paged(D=64):
    q = mx.zeros((2, 4, D))
    kp = mx.zeros((32, 2, D))
    return q, kp, kp, mx.zeros((2, 4), mx.int32), mx.array([3, 5]), 4, D ** -0.5


@pytest.fixture
def no_launch(monkeypatch):
    """Any kernel launch fails the test: the dispatcher had to decline first."""
    def refuse(*a, **k):
        raise AssertionError("a kernel was launched for a call it should have declined")
    for mod in (gds, gdc, pa, mr):
        monkeypatch.setattr(mod, "kernel", refuse)


def test_plain_set_declines_every_call(no_launch):
    m, _ = gdn_cases.make(0, 2, 3, 2, 4, 32, 4, mx.float32)
    assert NO_KERNELS.gated_delta_step(*_step_args(m)) is None
    assert NO_KERNELS.gated_delta_chunk(*_chunk_args(m)) is None
    assert NO_KERNELS.paged_decode_attention(*_paged()) is None
    assert NO_KERNELS.moe_route(mx.zeros((3, 64)), 4) is None


def test_kernel_turned_off_declines_while_others_launch(monkeypatch):
    ks = KernelSet("cuda", (("moe_route", "self-test error"),))
    launched = []
    monkeypatch.setattr(mr, "kernel", lambda *a, **k: launched.append("moe_route"))
    monkeypatch.setattr(pa, "kernel", lambda *a, **k: launched.append("paged") or "out")
    assert ks.moe_route(mx.zeros((3, 64)), 4) is None
    assert ks.paged_decode_attention(*_paged()) == "out"
    assert launched == ["paged"]


def test_shapes_outside_the_contract_decline(no_launch):
    ks = KernelSet("cuda")
    m, _ = gdn_cases.make(1, 2, 3, 2, 4, 32, 4, mx.float32)
    half_pool = m["pool"].astype(mx.float16)             # the kernels keep float32 states
    assert ks.gated_delta_step(*_step_args(m, half_pool)) is None
    assert ks.gated_delta_chunk(*_chunk_args(m, half_pool)) is None
    assert ks.paged_decode_attention(*_paged(D=48)) is None     # D not a multiple of 32
    assert ks.moe_route(mx.zeros((3, 48)), 4) is None           # E not a multiple of 32


def test_status_names_every_kernel():
    ks = KernelSet("metal", (("gated_delta_chunk", "self-test raised RuntimeError: x"),))
    assert ks.status() == {"gated_delta_step": "metal",
                           "gated_delta_chunk": "reference (self-test raised RuntimeError: x)",
                           "paged_attention": "metal", "moe_route": "metal",
                           "moe_experts": "metal", "moe_block": "metal",
                           "gdn_conv_step": "metal",
                           "add_rms_norm": "metal", "gated_rms_norm": "metal",
                           "attention_prep": "metal", "top_p_cut": "metal",
                           "gated_delta_step_norm": "metal",
                           "qmm_rows": f"reference ({CUDA_ONLY['qmm_rows']})",
                           "moe_grouped": f"reference ({CUDA_ONLY['moe_grouped']})",
                           "gdn_conv_chunk": "metal", "swiglu_joined": "metal",
                           "qmv_normed": f"reference ({CUDA_ONLY['qmv_normed']})",
                           "cdf_draw": "metal",
                           "add_norm_qmv": f"reference ({CUDA_ONLY['add_norm_qmv']})"}
    assert set(KernelSet.plain("no GPU").status().values()) == {"reference (no GPU)"}
