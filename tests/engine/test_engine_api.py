"""The public Engine API on a tiny model: streaming, batching, cancel, errors."""
from __future__ import annotations

import asyncio
import json

import mlx.core as mx
import pytest
from tiny_models import write_tiny_llama

from engine import Engine, EngineConfig, SamplingParams
from engine.errors import ModelLoadError, PromptTooLongError
from engine.events import FinishedEvent, StepEvent, TokenEvent


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("tiny") / "llama")


@pytest.fixture(scope="module")
def engine(folder):
    with Engine.load(folder, EngineConfig(num_pages=64, page_size=4, prefill_chunk=8,
                                          max_context=200)) as e:
        yield e


def pool_is_whole(engine):
    steps = []
    engine.add_listener(steps.append)
    engine.generate([[1, 2, 3]], SamplingParams(max_tokens=1))
    engine.remove_listener(steps.append)
    last = [s for s in steps if isinstance(s, StepEvent)][-1]
    # Only the probe itself and finished turns kept for their next turn hold pages.
    return last.kv_pages_used - last.kv_pages_cached <= 1


def test_stream_yields_tokens_then_finished(engine):
    events = list(engine.submit("hello world", SamplingParams(max_tokens=5)))
    assert all(isinstance(e, TokenEvent) for e in events[:-1])
    fin = events[-1]
    assert isinstance(fin, FinishedEvent) and fin.reason == "length"
    assert fin.stats.generated_tokens == 5 and len(fin.token_ids) == 5
    assert "".join(e.text for e in events[:-1]) == fin.text


def test_async_iteration(engine):
    async def collect():
        return [e async for e in engine.submit([5, 6, 7], SamplingParams(max_tokens=3))]
    events = asyncio.run(collect())
    assert isinstance(events[-1], FinishedEvent) and events[-1].stats.generated_tokens == 3


def test_generate_batches_prompts_together(engine):
    steps = []
    engine.add_listener(steps.append)
    outs = engine.generate([[1, 2, 3], [4, 5, 6, 7], [8, 9]], SamplingParams(max_tokens=6))
    engine.remove_listener(steps.append)
    assert [len(o.token_ids) for o in outs] == [6, 6, 6]
    assert max(s.batch_size for s in steps if isinstance(s, StepEvent)) == 3


def test_batched_greedy_equals_alone(engine):
    alone = engine.generate([[9, 8, 7, 6]], SamplingParams(max_tokens=8))[0]
    batch = engine.generate([[1, 2], [9, 8, 7, 6], [3, 3, 3]], SamplingParams(max_tokens=8))
    assert batch[1].token_ids == alone.token_ids


def test_logits_shape_and_consistency_with_generation(engine):
    prompt = [10, 20, 30, 40]
    out = engine.generate([prompt], SamplingParams(max_tokens=3))[0]
    logits = engine.logits(prompt + list(out.token_ids[:2]))
    assert logits.shape == (6, 320) and logits.dtype == mx.float32
    assert [int(x) for x in mx.argmax(logits[3:], axis=-1).tolist()] == list(out.token_ids)


@pytest.mark.parametrize("when", ["queued", "prefill", "decode"])
def test_cancel_frees_pages(engine, when):
    long_prompt = list(range(1, 60))
    blockers = [engine.submit(long_prompt, SamplingParams(max_tokens=30)) for _ in range(2)]
    h = engine.submit(long_prompt if when != "decode" else [1, 2], SamplingParams(max_tokens=50))
    if when == "decode":
        next(iter(h))                       # first token arrived: decoding
    elif when == "prefill":
        for b in blockers:
            b.cancel()
    h.cancel()
    fin = h.result()
    assert fin.finish_reason == "cancelled"
    for b in blockers:
        b.cancel()
        b.result()
    assert pool_is_whole(engine)


def test_stop_string_ends_and_is_not_shown(engine):
    full = engine.generate([[4, 4, 4]], SamplingParams(max_tokens=12))[0]
    assert len(full.text) > 4
    stop = full.text[2:4]
    out = engine.generate([[4, 4, 4]], SamplingParams(max_tokens=12, stop=(stop,)))[0]
    assert out.finish_reason == "stop" and stop not in out.text
    assert full.text.startswith(out.text)


def test_prompt_too_long_is_a_typed_error(engine):
    with pytest.raises(PromptTooLongError, match="context"):
        engine.submit(list(range(1, 250)))


def test_broken_folders_raise_typed_errors(tmp_path, folder):
    with pytest.raises(ModelLoadError, match="config.json"):
        Engine.load(tmp_path)
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in folder.iterdir():
        (bad / f.name).write_bytes(f.read_bytes())
    data = (bad / "model.safetensors").read_bytes()
    (bad / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match="model.safetensors"):
        Engine.load(bad)
    cfg = json.loads((folder / "config.json").read_text())
    (bad / "model.safetensors").write_bytes(data)
    (bad / "config.json").write_text(json.dumps({**cfg, "intermediate_size": 96}))
    with pytest.raises(ModelLoadError, match="mlp"):
        Engine.load(bad)
    (bad / "config.json").write_text(json.dumps({**cfg, "model_type": "mamba"}))
    with pytest.raises(ModelLoadError, match="not supported"):
        Engine.load(bad)


def test_each_event_reaches_listeners_once_and_a_quiet_handle_keeps_only_the_end(engine):
    seen = []
    engine.add_listener(seen.append)
    quiet = engine.submit([5, 6, 7], SamplingParams(max_tokens=6), stream=False)
    done = quiet.result()
    engine.remove_listener(seen.append)
    mine = [e for e in seen if getattr(e, "request_id", None) == quiet.request_id]
    tokens = [e for e in mine if isinstance(e, TokenEvent)]
    assert "".join(e.text for e in tokens) == done.text and len(done.token_ids) == 6
    assert len([e for e in mine if isinstance(e, FinishedEvent)]) == 1
    assert len({id(e) for e in tokens}) == len(tokens)
    assert quiet._events.qsize() == 0           # nothing queued that nobody reads
    assert list(engine.submit([5, 6, 7], SamplingParams(max_tokens=2), stream=False)) \
        and not engine._handles                 # handles are dropped once finished
