"""``python -m kernels.bench.nvcc_check --mlx-src DIR``: CUDA sources compiled by nvcc, no GPU.

Each kernel's CUDA body wrapped as MLX 0.32's ``mx.fast.cuda_kernel`` wraps it
(mlx/backend/cuda/custom_kernel.cpp ``build_kernel``: the default header, the signature
with ``Shape``/``Strides``/``ndim`` for the names the source uses, the template
constants), at the real model's shapes, in bf16 and float32, then ``nvcc -arch=sm_90a
-c -Xptxas -v``: compile errors, warnings, registers and spills. DIR is an MLX source
tree of the installed version (its ``mlx/backend/cuda/device/*.cuh``), e.g.
``git archive v0.32.1 mlx | tar -x -C DIR`` in a clone of ml-explore/mlx. Not a run:
kernels/bench/cuda_on_cpu.py runs the bodies on the CPU; only the GPU says they are fast.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile

import kernels.add_rms_norm as arn
import kernels.attention_prep as ap
import kernels.cdf_draw as cd
import kernels.gated_delta_chunk as gdc
import kernels.gated_delta_step as gds
import kernels.gated_delta_step_norm as gdsn
import kernels.gated_rms_norm as grn
import kernels.gdn_conv_chunk as gcc
import kernels.moe_block_src as mbs
import kernels.moe_experts_src as mes
import kernels.moe_grouped as mg
import kernels.moe_grouped_src as mgs
import kernels.moe_route as mr
import kernels.paged_attention_src as pas
import kernels.qmm_rows as qr
import kernels.qmm_rows_src as qrs
import kernels.qmv_normed as qn
import kernels.swiglu_joined as sj
import kernels.top_p_cut_src as tps
from kernels.cuda_jit_names import wrap_source

wrap = wrap_source     # the source MLX JIT-compiles (kernels/cuda_jit_names.py)


def cases(dt: str):
    """(what, wrapped source) at the Qwen3.5-35B-A3B shapes."""
    f32, i32 = "float32", "int32"
    yield "gated_delta_step GATES=1", wrap(
        "step", gds.CUDA_HEADER, gds._CUDA_SOURCE,
        [("q", dt, 3), ("k", dt, 3), ("v", dt, 3), ("g", dt, 2), ("beta", dt, 2),
         ("pool", f32, 4), ("slots", i32, 1), ("fresh", i32, 1), ("a_log", f32, 1),
         ("dt_bias", dt, 1)], [("y", dt)],
        [("OutT", dt), ("Hk", 16), ("Hv", 32), ("Dk", 128), ("Dv", 128), ("LPR", 32),
         ("GATES", 1), ("GC", 0), ("BC", 0)])
    yield "gdn_conv_chunk", wrap(
        "convc", "", gcc._CUDA_SOURCE,
        [("qkv", dt, 3), ("weight", dt, 3), ("pool", dt, 3), ("slots", i32, 1),
         ("fresh", i32, 1), ("lengths", i32, 1), ("eps", f32, 1)],
        [("q", dt), ("k", dt), ("v", dt)],
        [("OutT", dt), ("PoolT", dt), ("Hk", 16), ("Hv", 32), ("Dk", 128), ("Dv", 128),
         ("KS", 4), ("TT", gcc.TT)])
    for gates in (1, 0):
        yield f"gated_delta_chunk GATES={gates}", wrap(
            "chunk", gds.CUDA_HEADER, gdc._CUDA_SOURCE,
            [("q", dt, 4), ("k", dt, 4), ("v", dt, 4), ("g", dt if gates else f32, 3),
             ("beta", dt if gates else f32, 3), ("pool", f32, 4), ("slots", i32, 1),
             ("fresh", i32, 1), ("lengths", i32, 1), ("a_log", f32, 1), ("dt_bias", dt, 1)],
            [("y", dt)], [("OutT", dt), ("Hk", 16), ("Hv", 32), ("Dk", 128), ("Dv", 128),
                          ("LPR", 8), ("GATES", gates)])
    yield "gated_delta_step_norm GATES=1", wrap(
        "step_norm", gds.CUDA_HEADER, gdsn._CUDA_SOURCE,
        [("q", dt, 3), ("k", dt, 3), ("v", dt, 3), ("g", dt, 2), ("beta", dt, 2),
         ("pool", f32, 4), ("slots", i32, 1), ("fresh", i32, 1), ("a_log", f32, 1),
         ("dt_bias", dt, 1), ("z", dt, 2), ("weight", dt, 1), ("eps", f32, 1)], [("out", dt)],
        [("OutT", dt), ("Hk", 16), ("Hv", 32), ("Dk", 128), ("Dv", 128),
         *zip(("LPR", "ROWS"), gdsn.pick_layout(128, 128)), ("GATES", 1), ("Z3", 0),
         ("ZC", 8192), ("BC", 12288), ("GC", 12320)])
    yield "add_rms_norm", wrap(
        "addnorm", "", arn._CUDA_SOURCE,
        [("x", dt, 2), ("r", dt, 2), ("weight", dt, 1), ("eps", f32, 1)],
        [("h", dt), ("y", dt)], [("HT", dt), ("YT", dt)])
    yield "swiglu_joined (SmolLM2's MLP)", wrap(
        "swiglu", "", sj._CUDA_SOURCE, [("a", dt, 2)], [("y", dt)],
        [("T", dt), ("I", 1536), ("UC", 1536)])
    yield "gated_rms_norm", wrap(
        "gnorm", "", grn._CUDA_SOURCE,
        [("y", dt, 4), ("z", dt, 4), ("weight", dt, 1), ("eps", f32, 1)], [("out", dt)],
        [("OutT", dt)])
    prep_inputs = [("q", dt, 2), ("k", dt, 2), ("v", dt, 2), ("q_norm", dt, 1),
                   ("k_norm", dt, 1), ("offsets", i32, 1), ("slots", i32, 1),
                   ("k_pool", dt, 3), ("v_pool", dt, 3), ("eps", f32, 1), ("log2_base", f32, 1)]
    yield "attention_prep", wrap(
        "prep", "", ap._CUDA_SOURCE, prep_inputs, [("q_out", dt)],
        [("OutT", dt), ("PoolT", dt), ("Hq", 16), ("Hkv", 2), ("D", 256), ("QH", 512),
         ("RD", 64), ("NORM", 1), ("KC", 8192), ("VC", 8704)])
    yield "attention_prep NORM=0 (SmolLM2's heads)", wrap(
        "prep", "", ap._CUDA_SOURCE, prep_inputs, [("q_out", dt)],
        [("OutT", dt), ("PoolT", dt), ("Hq", 9), ("Hkv", 3), ("D", 64), ("QH", 64),
         ("RD", 64), ("NORM", 0), ("KC", 576), ("VC", 768)])
    for gated in (2, 1, 0):        # 2: the gate read from the joined q+gate projection
        yield f"paged_attention pass 2 GATED={gated}", wrap(
            "p2", pas._CUDA_HEADER, pas._CUDA_PASS2,
            [("part_acc", f32, 4), ("part_ml", f32, 4),
             ("gate", dt if gated else f32, 2 if gated == 2 else 3)],
            [("out", dt)], [("OutT", dt), ("D", 256), ("GATED", gated)])
    yield from moe_cases(dt)
    for bits in qn.BITS:            # the joined GDN input projection's K (hidden 2,048)
        yield f"qmv_normed BITS={bits}", wrap(
            "qmvn", "", qn._CUDA_SOURCE,
            [("x", dt, 2), ("norm_weight", dt, 1), ("eps", "float32", 1), ("w", "uint32", 2),
             ("scales", dt, 2), ("biases", dt, 2)],
            [("y", dt)], [("K", 2048), ("BITS", bits), ("GS", 64), ("WARPS", qn.WARPS),
                          ("ROWS_PER_WARP", qn.ROWS_PER_WARP), ("PAD", qn.PAD), ("OT", dt)])
    if dt == "float32":             # the sampler's keys and weights are float32 always
        yield "top_p_cut's pass", wrap(
            "pass", "", tps.PASS_CUDA,
            [("key", "int32", 2), ("weights", f32, 2), ("target", f32, 2),
             ("pass_no", "int32", 1), ("part_in", f32, 2), ("prefix_in", "int32", 2),
             ("before_in", f32, 2)],
            [("part", f32), ("prefix", "int32"), ("before", f32)], [])
        yield "top_p_cut's last decision and ties", wrap(
            "ties", "", tps.TIES_CUDA,
            [("key", "int32", 2), ("weights", f32, 2), ("target", f32, 2), ("part_in", f32, 2),
             ("prefix_in", "int32", 2), ("before_in", f32, 2)],
            [("cut", "int32"), ("cut_before", f32), ("ties", "int32"), ("tie_w", f32)], [])
        yield "top_p_cut's last tie", wrap(
            "last", "", tps.LAST_CUDA,
            [("key", "int32", 2), ("target", f32, 2), ("cut", "int32", 2),
             ("cut_before", f32, 2), ("ties", "int32", 2), ("tie_w", f32, 2)],
            [("out", "int32")], [])
        yield "cdf_draw", wrap("draw", "", cd._CUDA_SOURCE, [("kept", f32, 2), ("u", f32, 2)],
                               [("out", "int32")], [])
    if dt == "bfloat16":            # the tensor cores' bf16 product: bf16 x only
        for mt, bits in ((1, 4), (2, 4), (2, 8)):
            yield f"qmm_rows MT={mt} BITS={bits}", wrap(
                "qmm", qrs.CUDA_HEADER, qrs.CUDA_SOURCE,
                [("x", dt, 2), ("w", "uint32", 2), ("scales", dt, 2), ("biases", dt, 2)],
                [("y", dt)], [("MT", mt), ("NT", qr.NT), ("BITS", bits), ("GS", 64),
                              ("KSPLIT", qr.MAX_SPLIT), ("OT", dt)])


def moe_cases(dt: str):
    """moe_route, moe_experts and moe_block (the routing inside) at E=256, k=8, D=2048,
    I=512, group 64, with the shared expert and residual, as the model launches them."""
    f32, i32, u32 = "float32", "int32", "uint32"
    weights = [("w", u32, 3), ("scales", dt, 3), ("biases", dt, 3), ("sw", u32, 2),
               ("ss", dt, 2), ("sb", dt, 2)]
    size = [("D", 2048), ("I", 512), ("K", 8), ("GS", 64)]
    gu_t = size + [("R", 1024), ("RS", 1024), ("RPW", 4), ("SHARED", 1), ("TILE_MAJOR", 0)]
    dn_t = [("OutT", dt)] + size + [("RPW", 2), ("SHARED", 1), ("RES", 1), ("TILE_MAJOR", 0)]
    tail = [("gate", dt, 2), ("residual", dt, 2)]
    yield "moe_route", wrap("route", mr._KERNEL.headers["cuda"], mr._CUDA_SOURCE,
                            [("logits", dt, 2)], [("indices", i32), ("weights", f32)],
                            [("E", 256), ("K", 8), ("NORM", 1)])
    header, gate_up, down = mes._SOURCES["cuda"]
    for dedupe in (0, 1):
        yield f"moe_experts gate_up DEDUPE={dedupe}", wrap(
            "gu", header, gate_up, [("x", dt, 2), ("idx", i32, 2)] + weights, [("h", f32)],
            gu_t + [("DEDUPE", dedupe)])
    yield "moe_experts down", wrap("dn", header, down, [("h", f32, 2), ("idx", i32, 2),
                                                        ("scores", f32, 2)] + weights + tail,
                                   [("y", dt)], dn_t + [("SGC", 0)])
    grouped = mg.plan(2048, 512, 64)
    yield "moe_grouped gate_up", wrap(
        "ggu", mgs.CUDA_HEADER, mgs.CUDA_GATE_UP,
        [("x", dt, 2), ("order", u32, 1), ("eid", i32, 1)] + weights[:3],
        [("h", f32), ("seg", i32)], size + [("R", 1024)] + grouped["gate_up"])
    yield "moe_grouped down", wrap(
        "gdn", mgs.CUDA_HEADER, mgs.CUDA_DOWN,
        [("h", f32, 2), ("order", u32, 1), ("seg", i32, 1), ("scores", f32, 1)] + weights[:3],
        [("y", f32)], [("D", 2048), ("I", 512), ("GS", 64)] + grouped["down"])
    header, gate_up, down = mbs.SOURCES["cuda"]
    for rows in (0, 1):
        routed = [("E", 256), ("ROWS", rows)]
        yield f"moe_block gate_up ROWS={rows}", wrap(
            "bgu", header, gate_up,
            [("x", dt, 2), ("logits", dt, 2), ("row_map", i32, 1)] + weights, [("h", f32)],
            gu_t + routed)
        yield f"moe_block down ROWS={rows}", wrap(
            "bdn", header, down,
            [("h", f32, 2), ("logits", dt, 2), ("row_map", i32, 1)] + weights + tail,
            [("y", dt)], dn_t + routed + [("NORM", 1), ("SGC", 256)])


def compile_one(what: str, source: str, mlx_src: str, work: str) -> bool:
    path = f"{work}/k.cu"
    with open(path, "w") as f:
        f.write(source)
    r = subprocess.run(["nvcc", "-std=c++17", "-arch=sm_90a", f"-I{mlx_src}", "-c",
                        "-Xptxas", "-v", path, "-o", f"{work}/k.o"],
                       capture_output=True, text=True)
    out = (r.stdout + r.stderr).splitlines()
    keep = [ln.strip() for ln in out if any(w in ln for w in ("error", "warning", "registers",
                                                                  "spill"))]
    print(f"{what}: {'ok' if r.returncode == 0 else 'FAILED'}")
    for ln in keep[:20]:
        print(f"    {ln[:160]}")
    return r.returncode == 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mlx-src", required=True, help="an MLX source tree (its mlx/ folder inside)")
    p.add_argument("--only", default="", help="the cases whose name contains this (e.g. moe)")
    args = p.parse_args(argv)
    if shutil.which("nvcc") is None:
        print("nvcc not found")
        return 2
    work = tempfile.mkdtemp(prefix="nvcc_check_")
    ok = [compile_one(f"{what} ({dt})", src, args.mlx_src, work)
          for dt in ("bfloat16", "float32") for what, src in cases(dt) if args.only in what]
    return 0 if all(ok) else 1


if __name__ == "__main__":
    raise SystemExit(main())
