"""One model over several processes with mx.distributed: tensor parallelism in each layer.

Rank 0 runs the whole engine (scheduler, cache manager, sampling); every other rank
runs a follower loop (follower.py) that executes the forwards and cache copies rank
0 broadcasts (wire.py). Each rank holds one shard of every layer (shard_plan.py says
which rows or columns of which weight; sharding.py builds the local model and wraps
the layers whose outputs are partial sums). docs/DISTRIBUTED.md is the user's guide.

    sharding.py    the local model of one rank: from a full model, or from a folder
    shard_plan.py  per weight name: split rows, split columns, split experts, or keep
    layers.py      AllSum (row-parallel output), GatheredHead (vocab), ShardedMoeBlock
    wire.py        the step's messages: a fixed header and an int32 payload, sent with all_sum
    leader.py      rank 0: a Runner whose forwards and copies are broadcast first
    follower.py    ranks 1..N-1: receive and execute until the shutdown message
    disk_parts.py  the disk prompt cache: every rank's part of a turn in rank 0's files
    cluster.py     the group, the engine's hooks, what happens when a rank is lost
    heartbeat.py   rank 0 <-> followers over TCP: the ranks meet there before init, and a
                   lost rank is noticed in bounded time
    launch.py      --hosts: run the command under mlx.launch; followers stop there
    local.py       N ranks on this machine (tests, benchmark), bounded in time
    hosts_file.py  mlx.launch's hosts file read, and each host asked (no mlx; the app)
    traffic.py     bytes each rank's collectives send (the benchmark's count)
"""
