#!/bin/bash
# py-spy --native over `engine bench`'s timed rounds only (its warm-up instantiates every
# shape's CUDA graphs once and would drown the rest): where the engine thread's rare
# ~15 ms host bursts go in MLX's native code (issue 23; a graph exec instantiated anew
# shows as CudaGraphExec::instantiate / cudaGraphInstantiate). A GPU machine's queue job:
#   600 spy bash docs/bench/pyspy-rounds.sh WHEEL_DIR [NAME]
# Writes /tmp/run/NAME-bench.log, NAME.jsonl (the steps log), NAME.folded (py-spy's raw
# folded stacks) and NAME-top.txt (the native frames most sampled, the instantiates, and
# MLX's commit split into instantiate / exec update / launch); NAME defaults to spy.
# BATCH=1 (the environment) times B=1 alone; the default is 1,16,32.
set -u
WHL=${1:-.device/q27/whl}
N=${2:-spy}
OUT=/tmp/run
python3 -m pip install -q --no-index --no-deps "$WHL"/py_spy-*.whl
SPY="$(dirname "$(python3 -c 'import sys; print(sys.executable)')")/py-spy"
python3 -m engine bench --model synthetic:qwen3.5-35b-a3b --batch "${BATCH:-1,16,32}" --steps 32 \
    --rounds 5 --no-peer --prefill 128 --telemetry-interval 0 \
    --steps-log "$OUT/$N.jsonl" > "$OUT/$N-bench.log" 2>&1 &
PID=$!
until grep -q "warm-up (every shape once" "$OUT/$N-bench.log" 2>/dev/null \
        || ! kill -0 "$PID" 2>/dev/null; do
    sleep 0.2
done
"$SPY" record --native --rate 500 --pid "$PID" --format raw -o "$OUT/$N.folded" \
    > "$OUT/$N-record.log" 2>&1
wait "$PID"
{
    echo "# samples whose stack holds a graph instantiate (MLX: CudaGraphExec::instantiate):"
    grep -i "instantiate" "$OUT/$N.folded" | awk '{n += $NF} END {print n + 0}'
    for f in CommandEncoder::commit cudaGraphExecUpdate cudaGraphLaunch; do   # instantiate: above
        echo "# samples in $f: $(grep "$f" "$OUT/$N.folded" | awk '{n += $NF} END {print n + 0}')"
    done
    # MLX's eval commits early and waits when more than 10 commits are in flight
    # (transforms.cpp MAX_ACTIVE_TASKS): a commit boundary that moves with the GPU's progress,
    # so a graph key that can be new. Instantiates split by the commit's caller: gpu::eval
    # (every ~100 nodes) or gpu::finalize (an eval's end, or such an early commit).
    echo "# samples in the scheduler's wait_for_one (early commits): $(grep -i 'wait_for_one' "$OUT/$N.folded" | awk '{n += $NF} END {print n + 0}')"
    for c in "gpu::eval" "gpu::finalize"; do
        echo "# instantiate samples under $c: $(grep -i instantiate "$OUT/$N.folded" | grep "$c" | awk '{n += $NF} END {print n + 0}')"
    done
    echo "# samples in the engine thread's step loop: $(grep step_loop.py "$OUT/$N.folded" | awk '{n += $NF} END {print n + 0}')"
    echo "# the engine thread's most sampled innermost frames (stacks through its step loop):"
    grep "step_loop.py" "$OUT/$N.folded" \
        | awk '{n = $NF; $NF = ""; k = split($0, f, ";"); leaf[f[k]] += n} END {for (l in leaf) print leaf[l], l}' \
        | sort -rn | head -25
} > "$OUT/$N-top.txt"
cat "$OUT/$N-top.txt"
