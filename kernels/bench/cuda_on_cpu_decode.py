"""The decode step's kernels' CUDA sources run on the CPU (see kernels/bench/cuda_on_cpu.py).

gated_delta_step (raw gates, strided views, 4/8/32 lanes) alone and with its output norm
(gated_delta_step_norm: a block per head, at several layouts), add_rms_norm, gated_rms_norm,
attention_prep and the gated pass 2 of paged_attention: each body compiled by g++ with
kernels/bench/cuda_shim.py's shim and compared with a float64 numpy reference.
``python -m kernels.bench.cuda_on_cpu_decode`` runs these alone.
"""
import subprocess

import numpy as np

import kernels.add_rms_norm as arn
import kernels.attention_prep as ap
import kernels.gated_delta_step as gds
import kernels.gated_delta_step_norm as gdsn
import kernels.gated_rms_norm as grn
import kernels.paged_attention_src as pas
from kernels.bench.cuda_shim import PRE, WORK, kfunc, launch


def emulate_step(B, S, heads, lanes, fresh_rows, seed, gates=True, rows=None, z3=False,
                 cols=False):
    """gated_delta_step: q/k/v/a/b as strided views (columns of wider rows), the pool's
    slots out of order, raw gates (GATES=1) or ready ones. rows: gated_delta_step_norm
    instead, at layout (lanes, rows), z a strided view [B, Hv*D] (columns 8.. of a wider
    row, as in the joined projection: Z3=0), or with z3 the same memory as [B, Hv, D]
    (Z3=1, Qwen3-Next's layout). cols: a, b and z read from their columns of the whole
    row (GC, BC, ZC: as the model hands over the joined input projection)."""
    Hk, Hv, D = heads
    norm = rows is not None
    rng = np.random.default_rng(seed)
    W = 2 * D + 8                                   # q, k, v rows: [.., 4:4+D] of W
    qw, kw = (rng.standard_normal((B, Hk, W)).astype(np.float32) for _ in range(2))
    vw = rng.standard_normal((B, Hv, W)).astype(np.float32)
    abw = (rng.standard_normal((B, 2 * Hv + 3)) * 2).astype(np.float32)  # a: [:, 1:1+Hv], b after
    a_log = np.log(rng.uniform(1, 16, Hv)).astype(np.float32)
    dt_bias = rng.standard_normal(Hv).astype(np.float32)
    pool = (rng.standard_normal((S, Hv, D, D)) * 0.1).astype(np.float32)
    slots = rng.permutation(S)[:B].astype(np.int32)
    fresh = np.array([b in fresh_rows for b in range(B)], np.int32)
    ZW = Hv * D + 24                                # z: [:, 8:8+Hv*D] of ZW, per head D
    zw = rng.standard_normal((B, ZW)).astype(np.float32)
    nw = (1 + 0.1 * rng.standard_normal(D)).astype(np.float32)      # the norm's weight
    d = WORK
    arrs = {"qw": qw, "kw": kw, "vw": vw, "abw": abw, "alog": a_log, "dtb": dt_bias,
            "pool": pool, "slots": slots, "fresh": fresh, "zw": zw, "nw": nw}
    for k, v in arrs.items():
        v.tofile(f"{d}/{k}.bin")
    args = ("const float* q, const int* q_shape, const int64_t* q_strides,"
            " const float* k, const int64_t* k_strides, const float* v, const int64_t* v_strides,"
            " const float* g, const int64_t* g_strides, const float* beta,"
            " const int64_t* beta_strides, const float* pool, const int64_t* pool_strides,"
            " const int* slots, const int64_t* slots_strides, const int* fresh,"
            " const int64_t* fresh_strides, const float* a_log, const float* dt_bias, ")
    consts = [("OutT", "float"), ("Hk", Hk), ("Hv", Hv), ("Dk", D), ("Dv", D), ("LPR", lanes),
              ("GATES", int(gates)), ("GC", 1 if cols else 0), ("BC", 1 + Hv if cols else 0)]
    a_at, b_at = ("ABW.data()", "ABW.data()") if cols else ("ABW.data() + 1",
                                                          f"ABW.data() + {1 + Hv}")
    call = ("step(QW.data() + 4, QS, QKS, KW.data() + 4, QKS, VW.data() + 4, VS, "
            f"{a_at}, ABS, {b_at}, ABS, POOL.data(), PS, SL.data(), ONE, FR.data(), ONE,"
            " ALOG.data(), DTB.data(), ")
    if norm:      # a block per head: Dv * lanes / rows threads
        src = PRE + gds.CUDA_HEADER + kfunc(
            "step", gdsn._CUDA_SOURCE, args + "const float* z, const int64_t* z_strides,"
            " const float* weight, const int64_t* weight_strides, const float* eps, float* out",
            consts + [("ROWS", rows), ("Z3", int(z3)), ("ZC", 8 if cols else 0)])
        z_at = "ZX.data()" if cols else "ZX.data() + 8"
        run = launch("st", call + f"{z_at}, ZS, NW.data(), ONE, EPS.data(), Y.data())",
                     B * Hv, threads=D * lanes // rows)
    else:
        src = PRE + gds.CUDA_HEADER + kfunc("step", gds._CUDA_SOURCE,
                                                       args + "float* y", consts)
        run = launch("st", call + "Y.data())", -(-(B * Hv * D * lanes) // 256))
    AB = 2 * Hv + 3
    src += f'''
template <class T> std::vector<T> load(const char* n, size_t c) {{
  std::vector<T> v(c); FILE* f = fopen(n, "rb"); fread(v.data(), sizeof(T), c, f); fclose(f); return v; }}
std::vector<float> QW, KW, VW, ABW, ALOG, DTB, POOL, ZX, NW, Y, EPS{{1e-6f}};
std::vector<int> SL, FR;
int QS[3] = {{{B}, {Hk}, {D}}};
int64_t QKS[3] = {{{Hk * W}, {W}, 1}}, VS[3] = {{{Hv * W}, {W}, 1}}, ABS[2] = {{{AB}, 1}};
int64_t PS[4] = {{{Hv * D * D}, {D * D}, {D}, 1}}, ONE[1] = {{1}};
int64_t ZS[3] = {{{ZW}, {D if z3 else 1}, 1}};
''' + run + f'''
void save(const char* n, const std::vector<float>& v) {{
  FILE* f = fopen(n, "wb"); fwrite(v.data(), 4, v.size(), f); fclose(f); }}
int main() {{
  QW = load<float>("{d}/qw.bin", {B * Hk * W}); KW = load<float>("{d}/kw.bin", {B * Hk * W});
  VW = load<float>("{d}/vw.bin", {B * Hv * W}); ABW = load<float>("{d}/abw.bin", {B * AB});
  ALOG = load<float>("{d}/alog.bin", {Hv}); DTB = load<float>("{d}/dtb.bin", {Hv});
  POOL = load<float>("{d}/pool.bin", {S * Hv * D * D}); SL = load<int>("{d}/slots.bin", {B});
  FR = load<int>("{d}/fresh.bin", {B}); Y.assign({B * Hv * D}, -1e30f);
  ZX = load<float>("{d}/zw.bin", {B * ZW}); NW = load<float>("{d}/nw.bin", {D});
  run_st();
  save("{d}/y.bin", Y); save("{d}/pool2.bin", POOL);
}}
'''
    with open(f"{d}/emu.cpp", "w") as f:
        f.write(src)
    subprocess.run(["g++", "-std=c++20", "-O1", "-pthread", f"{d}/emu.cpp", "-o", f"{d}/emu"],
                   check=True)
    subprocess.run([f"{d}/emu"], check=True)
    y = np.fromfile(f"{d}/y.bin", np.float32).reshape(B, Hv, D)
    got_pool = np.fromfile(f"{d}/pool2.bin", np.float32).reshape(pool.shape)
    # float64 numpy: gates from a, b; state zero where fresh; the delta rule per head
    q, k, v = (w[..., 4:4 + D].astype(np.float64) for w in (qw, kw, vw))
    a, b = abw[:, 1:1 + Hv].astype(np.float64), abw[:, 1 + Hv:1 + 2 * Hv].astype(np.float64)
    if gates:
        g = np.exp(-np.exp(a_log.astype(np.float64)) * np.logaddexp(a + dt_bias, 0.0))
        beta = 1 / (1 + np.exp(-b))
    else:
        g, beta = a, b
    want_pool, want_y = pool.astype(np.float64).copy(), np.zeros((B, Hv, D))
    for r in range(B):
        for h in range(Hv):
            st = pool[slots[r], h].astype(np.float64) * (0.0 if fresh[r] else 1.0)
            kk, qq = k[r, h // (Hv // Hk)], q[r, h // (Hv // Hk)]
            st = st * g[r, h]
            st = st + np.outer((v[r, h] - st @ kk) * beta[r, h], kk)
            want_pool[slots[r], h], want_y[r, h] = st, st @ qq
    err_pool = float(np.abs(got_pool - want_pool).max())
    if not norm:
        err = max(float(np.abs(y - want_y).max()), err_pool)
        print(f"step lanes={lanes} B={B} S={S} heads={heads} gates={gates} "
              f"fresh={sorted(fresh_rows)}: max err {err:.2e}")
        return err
    # rms_norm(y) * w * silu(z) per head. The norm divides by the head's rms: a head whose y
    # nearly cancels carries float32 rounding amplified by 1/rms (the float32 numpy step
    # does too), so out's error is weighed in y's units, times rms, as the step's y is.
    z = zw[:, 8:8 + Hv * D].reshape(B, Hv, D).astype(np.float64)
    rms = np.sqrt((want_y ** 2).mean(-1, keepdims=True) + 1e-6)
    want = want_y / rms * nw * z / (1 + np.exp(-z))
    err_out = np.abs(y - want)
    err = max(float((err_out * rms).max()), err_pool)
    print(f"step+norm lanes={lanes} rows={rows} B={B} S={S} heads={heads} gates={gates} "
          f"z3={z3} cols={cols} "
          f"fresh={sorted(fresh_rows)}: max err {err:.2e} (out: {err_out.max():.2e} of "
          f"max|out| {np.abs(want).max():.2f}; times rms {float((err_out * rms).max()):.2e}; "
          f"states {err_pool:.2e})")
    return err


def emulate_add_norm(N, D, seed):
    """add_rms_norm: r a strided view (columns 8..8+D of a wider row); D any width."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, D)).astype(np.float32)
    rw = rng.standard_normal((N, D + 16)).astype(np.float32)
    w = (1 + 0.1 * rng.standard_normal(D)).astype(np.float32)
    d = WORK
    for k, v in {"x": x, "rw": rw, "w": w}.items():
        v.tofile(f"{d}/{k}.bin")
    src = PRE + kfunc("addnorm", arn._CUDA_SOURCE,
                      "const float* x, const int* x_shape, const int64_t* x_strides,"
                      " const float* r, const int64_t* r_strides, const float* weight,"
                      " const int64_t* weight_strides, const float* eps, float* h, float* y",
                      [("HT", "float"), ("YT", "float")])
    src += f'''
template <class T> std::vector<T> load(const char* n, size_t c) {{
  std::vector<T> v(c); FILE* f = fopen(n, "rb"); fread(v.data(), sizeof(T), c, f); fclose(f); return v; }}
std::vector<float> X, RW, W, H, Y, EPS{{1e-6f}};
int XS[2] = {{{N}, {D}}}; int64_t XST[2] = {{{D}, 1}}, RST[2] = {{{D + 16}, 1}}, WST[1] = {{1}};
''' + launch("an", "addnorm(X.data(), XS, XST, RW.data() + 8, RST, W.data(), WST, EPS.data(),"
                   " H.data(), Y.data())", N) + f'''
void save(const char* n, const std::vector<float>& v) {{
  FILE* f = fopen(n, "wb"); fwrite(v.data(), 4, v.size(), f); fclose(f); }}
int main() {{
  X = load<float>("{d}/x.bin", {N * D}); RW = load<float>("{d}/rw.bin", {N * (D + 16)});
  W = load<float>("{d}/w.bin", {D}); H.assign({N * D}, -1e30f); Y.assign({N * D}, -1e30f);
  run_an(); save("{d}/h.bin", H); save("{d}/y.bin", Y);
}}
'''
    with open(f"{d}/emu.cpp", "w") as f:
        f.write(src)
    subprocess.run(["g++", "-std=c++20", "-O1", "-pthread", f"{d}/emu.cpp", "-o", f"{d}/emu"],
                   check=True)
    subprocess.run([f"{d}/emu"], check=True)
    h = np.fromfile(f"{d}/h.bin", np.float32).reshape(N, D)
    y = np.fromfile(f"{d}/y.bin", np.float32).reshape(N, D)
    want_h = x.astype(np.float64) + rw[:, 8:8 + D]
    want_y = want_h / np.sqrt((want_h ** 2).mean(-1, keepdims=True) + 1e-6) * w
    err = max(float(np.abs(h - want_h).max()), float(np.abs(y - want_y).max()))
    print(f"add_rms_norm N={N} D={D}: max err {err:.2e}")
    return err


def emulate_gated_norm(B, T, H, D, seed):
    """gated_rms_norm: z a strided view (heads of columns 8.. of a wider row), y dense."""
    rng = np.random.default_rng(seed)
    y = rng.standard_normal((B, T, H, D)).astype(np.float32)
    W = H * D + 24
    zw = rng.standard_normal((B, T, W)).astype(np.float32)
    w = (1 + 0.1 * rng.standard_normal(D)).astype(np.float32)
    d = WORK
    for k, v in {"y": y, "zw": zw, "w": w}.items():
        v.tofile(f"{d}/{k}.bin")
    rows = B * T * H
    src = PRE + kfunc("gnorm", grn._CUDA_SOURCE,
                      "const float* y, const int* y_shape, const int64_t* y_strides,"
                      " const float* z, const int64_t* z_strides, const float* weight,"
                      " const int64_t* weight_strides, const float* eps, float* out",
                      [("OutT", "float")])
    src += f'''
template <class T> std::vector<T> load(const char* n, size_t c) {{
  std::vector<T> v(c); FILE* f = fopen(n, "rb"); fread(v.data(), sizeof(T), c, f); fclose(f); return v; }}
std::vector<float> Y, ZW, W, O, EPS{{1e-6f}};
int YS[4] = {{{B}, {T}, {H}, {D}}};
int64_t YST[4] = {{{T * H * D}, {H * D}, {D}, 1}}, ZST[4] = {{{T * W}, {W}, {D}, 1}}, WST[1] = {{1}};
''' + launch("gn", "gnorm(Y.data(), YS, YST, ZW.data() + 8, ZST, W.data(), WST, EPS.data(),"
                   " O.data())", -(-(rows * 32) // 256)) + f'''
int main() {{
  Y = load<float>("{d}/y.bin", {B * T * H * D}); ZW = load<float>("{d}/zw.bin", {B * T * W});
  W = load<float>("{d}/w.bin", {D}); O.assign({rows * D}, -1e30f);
  run_gn();
  FILE* f = fopen("{d}/o.bin", "wb"); fwrite(O.data(), 4, O.size(), f); fclose(f);
}}
'''
    with open(f"{d}/emu.cpp", "w") as f:
        f.write(src)
    subprocess.run(["g++", "-std=c++20", "-O1", "-pthread", f"{d}/emu.cpp", "-o", f"{d}/emu"],
                   check=True)
    subprocess.run([f"{d}/emu"], check=True)
    got = np.fromfile(f"{d}/o.bin", np.float32).reshape(B, T, H, D)
    yf = y.astype(np.float64)
    z = zw[..., 8:8 + H * D].reshape(B, T, H, D).astype(np.float64)
    want = yf / np.sqrt((yf * yf).mean(-1, keepdims=True) + 1e-6) * w * z / (1 + np.exp(-z))
    err = float(np.abs(got - want).max())
    print(f"gated_rms_norm B={B} T={T} H={H} D={D}: max err {err:.2e}")
    return err


def emulate_prep(B, heads, rd, R, seed, max_pos=64, norm=True, kv_columns=False):
    """attention_prep on the joined projection's views (q with its gate per head), pool
    rows out of order (norm=False: no q/k norms, NORM=0, as the llama family's; kv_columns:
    k and v read as columns KC, VC of the whole joined row, as the models launch it); then the
    gated pass 2 of the paged attention on random partials.
    Past a few hundred positions one ulp of an inverse frequency (glibc's exp2f here,
    numpy's there, CUDA's on the GPU) moves the angle by ~p * 2**-24 rad."""
    Hq, Hkv, D = heads
    rng = np.random.default_rng(seed)
    W = Hq * 2 * D + 2 * Hkv * D + 16
    joined = rng.standard_normal((B, W)).astype(np.float32)
    qw, kw = ((1 + 0.1 * rng.standard_normal(D)).astype(np.float32) for _ in range(2))
    offsets = rng.integers(0, max_pos, B).astype(np.int32)
    slots = rng.permutation(R)[:B].astype(np.int32)
    kp, vp = (rng.standard_normal((R, Hkv, D)).astype(np.float32) for _ in range(2))
    S = 3
    acc = rng.standard_normal((B, Hq, S, D)).astype(np.float32)
    ml = np.stack([rng.standard_normal((B, Hq, S)), rng.uniform(0.5, 2, (B, Hq, S))], -1)
    ml[0, 0, 1, 1] = 0.0                                   # an empty split is skipped
    ml = ml.astype(np.float32)
    d = WORK
    arrs = {"joined": joined, "qw": qw, "kw": kw, "off": offsets, "slots": slots, "kp": kp,
            "vp": vp, "acc": acc, "ml": ml}
    for k, v in arrs.items():
        v.tofile(f"{d}/{k}.bin")
    src = PRE + kfunc(
        "prep", ap._CUDA_SOURCE,
        "const float* q, const int* q_shape, const int64_t* q_strides, const float* k,"
        " const int64_t* k_strides, const float* v, const int64_t* v_strides,"
        " const float* q_norm, const int64_t* q_norm_strides, const float* k_norm,"
        " const int64_t* k_norm_strides, const int* offsets, const int64_t* offsets_strides,"
        " const int* slots, const int64_t* slots_strides, const float* k_pool,"
        " const int64_t* k_pool_strides, const float* v_pool, const int64_t* v_pool_strides,"
        " const float* eps, const float* log2_base, float* q_out",
        [("OutT", "float"), ("PoolT", "float"), ("Hq", Hq), ("Hkv", Hkv), ("D", D),
         ("QH", 2 * D), ("RD", rd), ("NORM", int(norm)),
         ("KC", Hq * 2 * D if kv_columns else 0),
         ("VC", Hq * 2 * D + Hkv * D if kv_columns else 0)])
    src += "#define NEG_INF (-INFINITY)\n" + kfunc(
        "p2", pas._CUDA_PASS2,
        "const float* part_acc, const float* part_ml, const int* part_ml_shape,"
        " const float* gate, const int64_t* gate_strides, float* out",
        [("OutT", "float"), ("D", D), ("GATED", 1)])
    src += kfunc(      # GATED=2: the gate read from the joined q+gate projection itself
        "p2j", pas._CUDA_PASS2,
        "const float* part_acc, const float* part_ml, const int* part_ml_shape,"
        " const float* gate, const int64_t* gate_strides, float* out",
        [("OutT", "float"), ("D", D), ("GATED", 2)])
    ko, vo = Hq * 2 * D, Hq * 2 * D + Hkv * D
    src += f'''
template <class T> std::vector<T> load(const char* n, size_t c) {{
  std::vector<T> v(c); FILE* f = fopen(n, "rb"); fread(v.data(), sizeof(T), c, f); fclose(f); return v; }}
std::vector<float> J, QW, KW, KP, VP, QO, ACC, ML, O, OJ, EPS{{1e-6f}}, LB{{{np.log2(1e7)}f}};
std::vector<int> OFF, SL;
int QS[2] = {{{B}, {Hq * 2 * D}}}; int64_t QST[2] = {{{W}, 1}}, ONE[1] = {{1}};
int64_t PST[3] = {{{Hkv * D}, {D}, 1}}; int MLS[4] = {{{B}, {Hq}, {S}, 2}};
int64_t GST[3] = {{{W}, {2 * D}, 1}}, GSTJ[2] = {{{W}, 1}};
''' + launch("pr", f"prep(J.data(), QS, QST, J.data() + {0 if kv_columns else ko}, QST,"
                   f" J.data() + {0 if kv_columns else vo}, QST,"
                   " QW.data(), ONE, KW.data(), ONE, OFF.data(), ONE, SL.data(), ONE,"
                   " KP.data(), PST, VP.data(), PST, EPS.data(), LB.data(), QO.data())",
                   -(-(B * (Hq + 2 * Hkv) * 32) // 256)) \
        + f'''
void run_p2() {{       // pass 2: a block of D threads per (row, head), no barriers
  for (int b = 0; b < {B * Hq}; ++b) for (int t = 0; t < {D}; ++t) {{
    blockIdx = {{b, 0, 0}}; threadIdx = {{t, 0, 0}};
    p2(ACC.data(), ML.data(), MLS, J.data() + {D}, GST, O.data());
    p2j(ACC.data(), ML.data(), MLS, J.data(), GSTJ, OJ.data()); }}
}}
void save(const char* n, const std::vector<float>& v) {{
  FILE* f = fopen(n, "wb"); fwrite(v.data(), 4, v.size(), f); fclose(f); }}
int main() {{
  J = load<float>("{d}/joined.bin", {B * W}); QW = load<float>("{d}/qw.bin", {D});
  KW = load<float>("{d}/kw.bin", {D}); OFF = load<int>("{d}/off.bin", {B});
  SL = load<int>("{d}/slots.bin", {B}); KP = load<float>("{d}/kp.bin", {R * Hkv * D});
  VP = load<float>("{d}/vp.bin", {R * Hkv * D}); QO.assign({B * Hq * D}, -1e30f);
  ACC = load<float>("{d}/acc.bin", {B * Hq * S * D}); ML = load<float>("{d}/ml.bin", {B * Hq * S * 2});
  O.assign({B * Hq * D}, -1e30f); OJ.assign({B * Hq * D}, -1e30f);
  run_pr(); run_p2();
  save("{d}/qo.bin", QO); save("{d}/kp2.bin", KP); save("{d}/vp2.bin", VP); save("{d}/o.bin", O);
  save("{d}/oj.bin", OJ);
}}
'''
    with open(f"{d}/emu.cpp", "w") as f:
        f.write(src)
    subprocess.run(["g++", "-std=c++20", "-O1", "-pthread", f"{d}/emu.cpp", "-o", f"{d}/emu"],
                   check=True)
    subprocess.run([f"{d}/emu"], check=True)
    got_q = np.fromfile(f"{d}/qo.bin", np.float32).reshape(B, Hq, D)
    got_k, got_v = (np.fromfile(f"{d}/{n}.bin", np.float32).reshape(R, Hkv, D)
                    for n in ("kp2", "vp2"))
    got_o = np.fromfile(f"{d}/o.bin", np.float32).reshape(B, Hq, D)
    got_oj = np.fromfile(f"{d}/oj.bin", np.float32).reshape(B, Hq, D)
    x = joined.astype(np.float64)
    pos = offsets.astype(np.float64)

    def norm_rope(h, w):
        if norm:
            h = h / np.sqrt((h * h).mean(-1, keepdims=True) + 1e-6) * w
        half = rd // 2      # the angle as the kernel (and MLX's rope) rounds it, in float32
        inv_freq = np.exp2(-(np.arange(half, dtype=np.float32) / np.float32(half))
                           * np.float32(np.log2(1e7)))
        theta = (pos.astype(np.float32)[:, None, None] * inv_freq).astype(np.float64)
        a, b = h[..., :half], h[..., half:rd]
        return np.concatenate([a * np.cos(theta) - b * np.sin(theta),
                               a * np.sin(theta) + b * np.cos(theta), h[..., rd:]], -1)
    want_q = norm_rope(x[:, :ko].reshape(B, Hq, 2 * D)[..., :D], qw)
    want_k, want_v = kp.astype(np.float64).copy(), vp.astype(np.float64).copy()
    want_k[slots] = norm_rope(x[:, ko:vo].reshape(B, Hkv, D), kw)
    want_v[slots] = x[:, vo:vo + Hkv * D].reshape(B, Hkv, D)
    M = ml[..., 0].max(-1, keepdims=True)
    wgt = np.where(ml[..., 1] > 0, np.exp2(ml[..., 0] - M), 0.0)            # [B, Hq, S]
    num = (wgt[..., None] * acc).sum(2)
    den = (wgt * ml[..., 1]).sum(-1, keepdims=True)
    gate = x[:, :ko].reshape(B, Hq, 2 * D)[..., D:]
    want_o = num / den / (1 + np.exp(-gate))
    err = max(float(np.abs(g - w).max()) for g, w in
              ((got_q, want_q), (got_k, want_k), (got_v, want_v), (got_o, want_o),
               (got_oj, want_o)))
    print(f"attention_prep norm={norm} kv_columns={kv_columns} B={B} heads={heads} rotary={rd} positions < {max_pos} "
          f"(+ gated pass 2, GATED=1 and 2): max err {err:.2e}")
    return err


def main():
    # (B, slots, (Hk, Hv, D), lanes, fresh rows): grouped heads, every lane count
    for case, gates in [((3, 5, (2, 4, 32), 8, {1}), True), ((1, 2, (1, 2, 128), 32, set()), True),
                        ((2, 4, (2, 2, 64), 4, {0}), False)]:
        assert emulate_step(*case, seed=3, gates=gates) < 1e-4
    # with the output norm: (B, slots, (Hk, Hv, D), (lanes, rows), fresh rows): the real
    # heads at the picked layout, B=1 and B=3; the other layouts (one row a thread; 32 lanes,
    # 4 rows); small heads at their picked layouts; ready gates
    for case, gates in [((1, 3, (16, 32, 128), (16, 2), set()), True),
                        ((3, 5, (16, 32, 128), (16, 2), {1}), True),
                        ((3, 4, (2, 4, 128), (8, 1), {0, 2}), True),
                        ((2, 3, (1, 2, 128), (32, 4), {1}), True),
                        ((2, 3, (2, 4, 128), gdsn.WIDE_LAYOUT, {1}), True),   # B >= 16 on CUDA
                        ((3, 5, (2, 4, 32), gdsn.pick_layout(32, 32), {1}), True),
                        ((2, 4, (2, 2, 64), gdsn.pick_layout(64, 64), {0}), False)]:
        B, S, heads, (lanes, rows), fresh = case
        for z3, cols in ((False, False), (True, False), (False, True)):
            assert emulate_step(B, S, heads, lanes, fresh, seed=8, gates=gates, rows=rows,
                                z3=z3, cols=cols) < 1e-4
    for N, D in [(1, 2048), (3, 200), (2, 40)]:    # the real width; ragged; fewer than a warp
        assert emulate_add_norm(N, D, seed=4) < 1e-5
    for B, T, H, D in [(1, 1, 32, 128), (2, 3, 4, 96), (3, 1, 3, 40)]:   # the real heads; rows % 8
        assert emulate_gated_norm(B, T, H, D, seed=5) < 1e-5
    for B, heads, rd, R in [(1, (16, 2, 256), 64, 7), (3, (4, 2, 64), 16, 9)]:
        assert emulate_prep(B, heads, rd, R, seed=6) < 1e-5
    assert emulate_prep(3, (9, 3, 64), 64, 9, seed=8, norm=False) < 1e-5   # SmolLM2's heads
    for norm in (True, False):                                 # as the models launch it
        assert emulate_prep(2, (4, 2, 64), 16, 9, seed=9, norm=norm, kv_columns=True) < 1e-5
    assert emulate_prep(2, (16, 2, 256), 64, 7, seed=7, max_pos=5000) < 2e-3


if __name__ == "__main__":
    main()
