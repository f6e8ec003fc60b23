"""A sharded MoE block (engine/distributed/layers.py) takes the router's joined output
made beside the layer's add and norm (kernels/add_norm_qmv at one decode row, through
DecoderLayer) as SparseMoeBlock does: the same output as routing itself."""
import mlx.core as mx
import numpy as np
from qwen_fixtures import build_model, random_weights, tiny_config

from engine.distributed.layers import ShardedMoeBlock
from engine.distributed.sharding import shard_model


def test_a_sharded_moe_block_takes_the_routers_joined_output():
    config = tiny_config("qwen3_5_moe")
    model = build_model(config, random_weights(config, seed=3))
    sharded = shard_model(model, mx.distributed.init())        # one rank: all experts
    sharded.fuse_projections()                                   # as a sharded load does
    block = sharded.layers[0].mlp
    assert isinstance(block, ShardedMoeBlock) and "gates" in block
    x = mx.random.normal((3, config["text_config"]["hidden_size"]), key=mx.random.key(4))
    want = block(x)
    got = block(x, gates=block.gates.joined_output(x))
    np.testing.assert_array_equal(np.array(got), np.array(want))
