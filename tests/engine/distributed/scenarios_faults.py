"""Scenarios of a lost rank: a follower that exits or freezes mid-reply (rank_main.py)."""
from __future__ import annotations

from scenarios import CONFIG, PROMPT, _greedy, _in_memory, _serve


def _long_request(engine) -> None:
    """A reply that outlives the lost rank: it must end as an error that says so, and
    the engine must take no new request. (Rank 0 then ends with EXIT_LOST.)"""
    import time
    t0 = time.monotonic()
    first = engine.submit(PROMPT, _greedy(190)).result()
    print(f"first: {first.finish_reason} after {time.monotonic() - t0:.1f} s "
          f"(at {time.monotonic():.3f}): {first.message}", flush=True)
    try:
        engine.submit(PROMPT[:3], _greedy(5))
    except Exception as e:          # EngineClosedError
        print(f"second: refused: {type(e).__name__}", flush=True)
    time.sleep(30)                  # the process ends before this


def _doomed_follower(group, folder, how: str) -> None:
    """A follower that follows 30 messages, then ends (how="exit") or freezes (how="stop")."""
    import os
    import signal
    import time

    from engine.distributed.follower import Follower
    from engine.distributed.sharding import shard_model
    from engine.loading.model_bundle import _in_memory_bundle
    model = _in_memory("llama", folder / f"tok{group.rank()}")
    model = type(model)(shard_model(model.model, group), model.tokenizer, {}, model.name)
    bundle = _in_memory_bundle(model, CONFIG, lambda p: None)
    follower = Follower(bundle.model, CONFIG, group)
    while True:
        header = follower.wire.receive_header()
        follower.num_messages += 1
        if follower.num_messages == 30:
            print(f"doomed: {how} at {time.monotonic():.3f}", flush=True)
            if how == "exit":
                os._exit(1)
            os.kill(os.getpid(), signal.SIGSTOP)
        follower.apply(header)


def engine_kill(group, folder) -> None:
    """The last rank exits mid-reply; any others follow as usual (and must end once
    rank 0 has)."""
    if group.rank() == group.size() - 1:
        return _doomed_follower(group, folder, "exit")
    return _serve(group, "llama", folder, _long_request)


def engine_hang(group, folder) -> None:
    """The last rank freezes (SIGSTOP): its heartbeat falls silent too."""
    if group.rank() == group.size() - 1:
        return _doomed_follower(group, folder, "stop")
    return _serve(group, "llama", folder, _long_request)
