"""A prompt chunk's Gated DeltaNet kernels' CUDA sources run on the CPU (see
kernels/bench/cuda_on_cpu.py): gdn_conv_chunk and gated_delta_chunk.

gdn_conv_chunk on a strided qkv view (a slice of the projection's wider rows), ragged
and fresh rows, tiles of its tokens, the new conv states written into the pool. The
chunk's recurrence as the model launches it: q, k and v views of wider rows
(the conv's output split), the raw gates a and b columns of the projection (GATES=1) or
ready ones, rows of different lengths (right-padded), fresh rows, the pool's slots out of
order; compared with a float64 numpy token loop. ``python -m
kernels.bench.cuda_on_cpu_chunk`` runs its cases (~10 s each on two cores).
"""
import numpy as np

import kernels.gated_delta_chunk as gdc
import kernels.gated_delta_step as gds
import kernels.gdn_conv_chunk as gcc
from kernels.bench.cuda_shim import PRE, WORK, build_and_run, kfunc, launch


def emulate_chunk(B, T, S, heads, lanes, lengths, fresh_rows, seed, gates=True):
    """Max |difference| of y and of the written pool rows against float64 numpy."""
    Hk, Hv, D = heads
    rng = np.random.default_rng(seed)
    W = D + 8                                        # q, k, v rows: [..., 4:4+D] of W
    qw, kw = (rng.standard_normal((B, T, Hk, W)).astype(np.float32) * 0.5 for _ in range(2))
    vw = rng.standard_normal((B, T, Hv, W)).astype(np.float32)
    AB = 2 * Hv + 3                                  # a: [..., 1:1+Hv], b after it
    abw = (rng.standard_normal((B, T, AB)) * 2).astype(np.float32)
    if not gates:                                    # ready gates: a decay in (0, 1), beta
        abw[..., 1:1 + Hv] = rng.uniform(0.5, 1.0, (B, T, Hv))
        abw[..., 1 + Hv:1 + 2 * Hv] = rng.uniform(0.0, 1.0, (B, T, Hv))
    a_log = np.log(rng.uniform(1, 16, Hv)).astype(np.float32)
    dt_bias = rng.standard_normal(Hv).astype(np.float32)
    pool = (rng.standard_normal((S, Hv, D, D)) * 0.1).astype(np.float32)
    slots = rng.permutation(S)[:B].astype(np.int32)
    fresh = np.array([b in fresh_rows for b in range(B)], np.int32)
    lens = np.array(lengths, np.int32)
    d = WORK
    arrs = {"qw": qw, "kw": kw, "vw": vw, "abw": abw, "alog": a_log, "dtb": dt_bias,
            "pool": pool, "slots": slots, "fresh": fresh, "lens": lens}
    for k, v in arrs.items():
        v.tofile(f"{d}/{k}.bin")
    args = ("const float* q, const int* q_shape, const int64_t* q_strides,"
            " const float* k, const int64_t* k_strides, const float* v, const int64_t* v_strides,"
            " const float* g, const int64_t* g_strides, const float* beta,"
            " const int64_t* beta_strides, const float* pool, const int64_t* pool_strides,"
            " const int* slots, const int* fresh, const int* lengths, const float* a_log,"
            " const float* dt_bias, float* y")
    consts = [("OutT", "float"), ("Hk", Hk), ("Hv", Hv), ("Dk", D), ("Dv", D), ("LPR", lanes),
              ("GATES", int(gates))]
    src = (PRE + "using std::min;\n" + gds.CUDA_HEADER
           + kfunc("chunk", gdc._CUDA_SOURCE, args, consts))
    call = ("chunk(QW.data() + 4, QS, QKS, KW.data() + 4, QKS, VW.data() + 4, VS, ABW.data() + 1,"
            f" ABS, ABW.data() + 1 + {Hv}, ABS, POOL.data(), PS, SL.data(), FR.data(), LN.data(),"
            " ALOG.data(), DTB.data(), Y.data())")
    src += f'''
template <class T> std::vector<T> load(const char* n, size_t c) {{
  std::vector<T> v(c); FILE* f = fopen(n, "rb"); fread(v.data(), sizeof(T), c, f); fclose(f); return v; }}
std::vector<float> QW, KW, VW, ABW, ALOG, DTB, POOL, Y;
std::vector<int> SL, FR, LN;
int QS[4] = {{{B}, {T}, {Hk}, {D}}};
int64_t QKS[4] = {{{T * Hk * W}, {Hk * W}, {W}, 1}}, VS[4] = {{{T * Hv * W}, {Hv * W}, {W}, 1}};
int64_t ABS[3] = {{{T * AB}, {AB}, 1}}, PS[4] = {{{Hv * D * D}, {D * D}, {D}, 1}};
''' + launch("ch", call, -(-(B * Hv * D * lanes) // 256)) + f'''
void save(const char* n, const std::vector<float>& v) {{
  FILE* f = fopen(n, "wb"); fwrite(v.data(), 4, v.size(), f); fclose(f); }}
int main() {{
  QW = load<float>("{d}/qw.bin", {qw.size}); KW = load<float>("{d}/kw.bin", {kw.size});
  VW = load<float>("{d}/vw.bin", {vw.size}); ABW = load<float>("{d}/abw.bin", {abw.size});
  ALOG = load<float>("{d}/alog.bin", {Hv}); DTB = load<float>("{d}/dtb.bin", {Hv});
  POOL = load<float>("{d}/pool.bin", {pool.size}); SL = load<int>("{d}/slots.bin", {B});
  FR = load<int>("{d}/fresh.bin", {B}); LN = load<int>("{d}/lens.bin", {B});
  Y.assign({B * T * Hv * D}, -1e30f);
  run_ch();
  save("{d}/y.bin", Y); save("{d}/pool2.bin", POOL);
}}
'''
    build_and_run(src, d)
    y = np.fromfile(f"{d}/y.bin", np.float32).reshape(B, T, Hv, D)
    got_pool = np.fromfile(f"{d}/pool2.bin", np.float32).reshape(pool.shape)
    want_y, want_pool = _numpy(qw, kw, vw, abw, a_log, dt_bias, pool, slots, fresh, lens,
                               heads, gates)
    err = max(float(np.abs(y - want_y).max()), float(np.abs(got_pool - want_pool).max()))
    print(f"chunk lanes={lanes} B={B} T={T} S={S} heads={heads} lengths={list(lengths)} "
          f"fresh={sorted(fresh_rows)} gates={gates}: max err {err:.2e}")
    return err


def _numpy(qw, kw, vw, abw, a_log, dt_bias, pool, slots, fresh, lens, heads, gates):
    """float64: gates from a, b (or as given); per row and head the delta rule over its
    own tokens; padded tokens give 0 and leave the state."""
    Hk, Hv, D = heads
    B, T = qw.shape[:2]
    q, k, v = (w[..., 4:4 + D].astype(np.float64) for w in (qw, kw, vw))
    a, b = abw[..., 1:1 + Hv].astype(np.float64), abw[..., 1 + Hv:1 + 2 * Hv].astype(np.float64)
    if gates:
        g = np.exp(-np.exp(a_log.astype(np.float64)) * np.logaddexp(a + dt_bias, 0.0))
        beta = 1 / (1 + np.exp(-b))
    else:
        g, beta = a, b
    want_pool, want_y = pool.astype(np.float64).copy(), np.zeros((B, T, Hv, D))
    for r in range(B):
        for h in range(Hv):
            st = pool[slots[r], h].astype(np.float64) * (0.0 if fresh[r] else 1.0)
            hk = h // (Hv // Hk)
            for t in range(min(lens[r], T)):
                st = st * g[r, t, h]
                st = st + np.outer((v[r, t, h] - st @ k[r, t, hk]) * beta[r, t, h], k[r, t, hk])
                want_y[r, t, h] = st @ q[r, t, hk]
            want_pool[slots[r], h] = st
    return want_y, want_pool


def emulate_conv_chunk(B, T, S, heads, K, lengths, fresh_rows, seed):
    """Max |difference| of q, k, v and of the written pool rows against float64 numpy."""
    Hk, Hv, Dk, Dv = heads
    C = 2 * Hk * Dk + Hv * Dv
    rng = np.random.default_rng(seed)
    wide = rng.standard_normal((B, T, C + 48)).astype(np.float32)     # qkv = [..., 16:16+C]
    weight = (rng.standard_normal((C, K, 1)) * 0.5).astype(np.float32)
    pool = rng.standard_normal((S, K - 1, C)).astype(np.float32)
    slots = rng.permutation(S)[:B].astype(np.int32)
    fresh = np.array([b in fresh_rows for b in range(B)], np.int32)
    lens = np.array(lengths, np.int32)
    d = WORK
    for k, v in {"wide": wide, "weight": weight, "pool": pool, "slots": slots,
                 "fresh": fresh, "lens": lens}.items():
        v.tofile(f"{d}/{k}.bin")
    tiles = -(-T // gcc.TT)
    nb = -(-(B * (2 * Hk + Hv) * tiles * 32) // 256)
    src = PRE + "using std::min;\n" + kfunc(
        "conv", gcc._CUDA_SOURCE,
        "const float* qkv, const int* qkv_shape, const int64_t* qkv_strides,"
        " const float* weight, const int64_t* weight_strides, const float* pool,"
        " const int64_t* pool_strides, const int* slots, const int* fresh, const int* lengths,"
        " const float* eps, float* q, float* k, float* v",
        [("OutT", "float"), ("PoolT", "float"), ("Hk", Hk), ("Hv", Hv), ("Dk", Dk),
         ("Dv", Dv), ("KS", K), ("TT", gcc.TT)])
    W = C + 48
    src += f'''
template <class T> std::vector<T> load(const char* n, size_t c) {{
  std::vector<T> v(c); FILE* f = fopen(n, "rb"); fread(v.data(), sizeof(T), c, f); fclose(f); return v; }}
std::vector<float> WIDE, WT, POOL, Q, K_, V, EPS{{1e-6f}}; std::vector<int> SL, FR, LN;
int QS[3] = {{{B}, {T}, {C}}}; int64_t QST[3] = {{{T * W}, {W}, 1}};
int64_t PST[3] = {{{(K - 1) * C}, {C}, 1}}; int64_t WST[3] = {{{K}, 1, 1}};
''' + launch("cv", "conv(WIDE.data() + 16, QS, QST, WT.data(), WST, POOL.data(), PST, SL.data(),"
                   " FR.data(), LN.data(), EPS.data(), Q.data(), K_.data(), V.data())", nb) + f'''
void save(const char* n, const std::vector<float>& v) {{
  FILE* f = fopen(n, "wb"); fwrite(v.data(), 4, v.size(), f); fclose(f); }}
int main() {{
  WIDE = load<float>("{d}/wide.bin", {wide.size}); WT = load<float>("{d}/weight.bin", {C * K});
  POOL = load<float>("{d}/pool.bin", {pool.size}); SL = load<int>("{d}/slots.bin", {B});
  FR = load<int>("{d}/fresh.bin", {B}); LN = load<int>("{d}/lens.bin", {B});
  Q.assign({B * T * Hk * Dk}, -1e30f); K_.assign({B * T * Hk * Dk}, -1e30f);
  V.assign({B * T * Hv * Dv}, -1e30f);
  run_cv();
  save("{d}/q.bin", Q); save("{d}/k.bin", K_); save("{d}/v.bin", V); save("{d}/pool2.bin", POOL);
}}
'''
    build_and_run(src, d)
    got = [np.fromfile(f"{d}/{n}.bin", np.float32) for n in ("q", "k", "v", "pool2")]
    # float64 numpy: Z = [state (zero when fresh); x]; conv, silu, split, normalise; the
    # tail at each row's length; 0 past it
    x = wide[..., 16:16 + C].astype(np.float64)
    want_pool = pool.astype(np.float64).copy()
    want = [np.zeros((B, T, Hk, Dk)), np.zeros((B, T, Hk, Dk)), np.zeros((B, T, Hv, Dv))]
    kd = Hk * Dk
    for r in range(B):
        old = np.zeros((K - 1, C)) if fresh[r] else pool[slots[r]].astype(np.float64)
        z = np.concatenate([old, x[r]], axis=0)                            # [K-1+T, C]
        for t in range(min(lens[r], T)):
            y = (z[t:t + K] * weight[:, :, 0].T).sum(axis=0)
            y = y / (1 + np.exp(-y))
            qh, kh = y[:kd].reshape(Hk, Dk), y[kd:2 * kd].reshape(Hk, Dk)
            want[0][r, t] = qh / np.sqrt((qh * qh).sum(-1, keepdims=True) + 1e-6) * Dk ** -0.5
            want[1][r, t] = kh / np.sqrt((kh * kh).sum(-1, keepdims=True) + 1e-6)
            want[2][r, t] = y[2 * kd:].reshape(Hv, Dv)
        want_pool[slots[r]] = z[lens[r]:lens[r] + K - 1]
    err = max(float(np.abs(g - w.reshape(-1)).max()) for g, w in zip(got, want + [want_pool]))
    print(f"conv chunk B={B} T={T} S={S} heads={heads} K={K} lengths={list(lengths)} "
          f"fresh={sorted(fresh_rows)}: max err {err:.2e}")
    return err


CONV_CASES = [  # (B, T, slots, (Hk, Hv, Dk, Dv), K, lengths, fresh rows)
    (2, 37, 4, (1, 2, 64, 32), 4, (37, 20), {1}),      # three tiles, ragged, a fresh row
    (3, 5, 5, (2, 1, 32, 64), 4, (5, 2, 0), {0}),      # shorter than the window; empty row
    (1, 16, 2, (1, 1, 32, 32), 2, (16,), set()),       # one tile exactly, K = 2
]

CASES = [  # (B, T, slots, (Hk, Hv, D), lanes, lengths, fresh rows, raw gates)
    (2, 5, 4, (2, 4, 32), 8, (5, 3), {1}, True),      # ragged, grouped heads, a fresh row
    (1, 4, 2, (1, 2, 128), 32, (4,), set(), True),    # the real head width at 32 lanes
    (3, 3, 5, (2, 2, 64), 16, (3, 0, 2), {0}, False),  # an empty row; ready gates
]


def main():
    for B, T, S, heads, K, lengths, fresh in CONV_CASES:
        assert emulate_conv_chunk(B, T, S, heads, K, lengths, fresh, seed=12) < 1e-5
    for B, T, S, heads, lanes, lengths, fresh, gates in CASES:
        assert emulate_chunk(B, T, S, heads, lanes, lengths, fresh, seed=11, gates=gates) < 1e-4


if __name__ == "__main__":
    main()
