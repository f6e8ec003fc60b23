#!/bin/bash
# A soak on a GPU: does a long-lived process meet MLX 0.32's CUDA graph-cache abort?
# MLX's graph-exec cache (mlx/backend/cuda/lru_cache.h, 400 entries unless
# MLX_CUDA_GRAPH_CACHE_SIZE says otherwise) throws "Cache thrashing is happening" once it
# has missed 2x its capacity over the process's life (the count is never reset), and a
# key is a graph's node types and edges: each distinct step composition (rows, chunks,
# pieces, sampling) adds keys. A tiny Qwen3.5-MoE folder (tests/engine/qwen_fixtures.py)
# steps fast, so minutes of the soak's mixed load (engine/bench/soak.py) meet many
# compositions. A GPU machine's queue job:   600 soak bash docs/bench/soak-cuda.sh 6 (a cold
# kernel cache for the tiny shapes takes minutes of the 600 s)
set -u
MINUTES=${1:-6}
FOLDER=${SOAK_FOLDER:-/tmp/soak-tiny-qwen}   # apart for soaks that run side by side
PYTHONPATH=.:tests/engine "${PYTHON:-python3}" - "$FOLDER" <<'PY'
import sys
from pathlib import Path

from qwen_fixtures import random_weights, tiny_config, write_mlx_folder

config = tiny_config("qwen3_5_moe")
write_mlx_folder(Path(sys.argv[1]), config, random_weights(config))
PY
"${PYTHON:-python3}" -m engine.bench.soak --minutes "$MINUTES" --model "$FOLDER" --api-streams 0
echo "soak rc=$?"
