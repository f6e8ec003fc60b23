"""A grammar row (or a logprob row) costs the rest of its batch no host/device overlap.

On a GPU, reading a value the step did not queue (`ids[row].item()`: a new op) puts that
op on the stream behind everything queued since, the next step's forward included: the
host waits for all of it, and the device idles while the host fills the mask, builds the
sampling and the next forward (the H200 measured a constrained batch's step at 1.7x a
plain one's; docs/SERVER.md). The signature, deterministic on any backend: which arrays
the host reads, and in what order against what is queued.
"""
from __future__ import annotations

import mlx.core as mx
from engine_harness import Harness, _NoDetok
from fakes import OnlyIds
from tiny_models import VOCAB, tiny_llama

from engine.core.output_stream import OutputStream
from engine.core.sampler import RowSampler
from engine.core.sequence import Sequence
from engine.core.step_loop import Request
from engine.sampling_params import SamplingParams

PROMPTS = [[5, 6, 7, 8], [9, 10, 11], [12, 13, 14, 15, 16]]
ALLOWED = set(range(0, VOCAB, 7))
STEPS = 6


class HostReads:
    """Records in order: mx.async_eval calls ("queue", the ids of the arrays queued),
    step starts ("step", None) and host reads of device values (item, tolist, mx.eval):
    ("read", id) of an array queued before, or ("read new op", None). Queued arrays are
    kept alive so that their ids are not reused."""

    def __init__(self, monkeypatch, loop):
        self.events: list[tuple[str, object]] = []
        self._queued: dict[int, mx.array] = {}
        real_async, real_eval = mx.async_eval, mx.eval
        real_item, real_tolist = mx.array.item, mx.array.tolist

        def queue(*arrays):
            ids = frozenset(id(a) for a in _flat(arrays))
            self._queued.update((id(a), a) for a in _flat(arrays))
            if ids:                 # an empty one (no saves to gather) queues nothing
                self.events.append(("queue", ids))
            return real_async(*arrays)

        def wait(*arrays):
            for a in _flat(arrays):
                self._read(a)
            return real_eval(*arrays)

        monkeypatch.setattr(mx, "async_eval", queue)
        monkeypatch.setattr(mx, "eval", wait)
        monkeypatch.setattr(mx.array, "item", lambda a: self._read(a) or real_item(a))
        monkeypatch.setattr(mx.array, "tolist", lambda a: self._read(a) or real_tolist(a))
        step = loop.step
        monkeypatch.setattr(loop, "step", lambda: self.events.append(("step", None)) or step())

    def _read(self, a) -> None:
        self.events.append(("read", id(a)) if id(a) in self._queued else ("read new op", None))

    def new_op_reads(self) -> int:
        return sum(kind == "read new op" for kind, _ in self.events)

    def first_reads_per_step(self) -> list[int]:
        """Per step: how many arrays the host read that it had not read before."""
        seen, counts = set(), []
        for kind, key in self.events:
            if kind == "step":
                counts.append(0)
            elif kind == "read" and key not in seen and counts:
                seen.add(key)
                counts[-1] += 1
        return counts

    def reads_with_nothing_queued_since(self) -> list[int]:
        """Event indices of first reads of an array with no queuing between the one that
        queued it and the read: the device had nothing more to run while the host waited
        (the last step's own ids, read when nothing is left to run, are left out)."""
        last = [key for kind, key in self.events if kind == "read"][-1]
        queued_at, seen, late = {}, set(), []
        for i, (kind, key) in enumerate(self.events):
            if kind == "queue":
                for k in key:
                    queued_at.setdefault(k, i)
            elif kind == "read" and key not in seen and key != last:
                seen.add(key)
                if not any(e[0] == "queue" for e in self.events[queued_at[key] + 1:i]):
                    late.append(i)
        return late


def _flat(arrays):
    for a in arrays:
        if isinstance(a, (list, tuple)):
            yield from _flat(a)
        elif isinstance(a, mx.array):
            yield a


def _run(monkeypatch=None, constrained=True, logprobs=None):
    """Three greedy rows decoding together; row 0 grammar-constrained (and row 2 with
    logprobs) or all plain. Returns (harness, HostReads or None, each row's params)."""
    h = Harness(tiny_llama(), pipeline_steps=True)     # the GPU's overlap, on any machine
    rows = []
    for rid, prompt in enumerate(PROMPTS):
        rows.append(SamplingParams(
            max_tokens=STEPS, temperature=0, logprobs=logprobs if rid == 2 else None,
            constraint=OnlyIds(ALLOWED) if constrained and rid == 0 else None))
        seq = h.seqs[rid] = Sequence(rid, list(prompt))
        stream = OutputStream(_NoDetok(), frozenset(), rows[-1], h.config.max_context)
        h.loop.add(Request(seq, RowSampler(rows[-1], prompt), stream))
    reads = HostReads(monkeypatch, h.loop) if monkeypatch else None
    h.run()
    return h, reads, rows


def test_a_constrained_batch_reads_only_what_its_steps_queued_one_wait_a_step(monkeypatch):
    """Every host read is of an array queued with its step (never a new op, which would
    wait for the next step's forward too), and each decode step reads one array it had
    not read before, the previous step's ids: one host wait a step, as without it."""
    h, reads, rows = _run(monkeypatch)
    assert reads.new_op_reads() == 0
    counts = reads.first_reads_per_step()
    # The prompt's step reads nothing; the last also reads its own ids (nothing is left).
    assert counts == [0] + [1] * (STEPS - 1) + [2], counts
    assert all(t in ALLOWED for t in h.seqs[0].output_ids)
    assert rows[0].constraint.accepted == h.seqs[0].output_ids


def test_a_constrained_row_waits_for_its_token_after_the_next_forward_is_queued(
        monkeypatch):
    """Step n queues its forward before the host waits for step n-1's ids (the mask needs
    that token): between the queuing of an ids array and its first read there is always
    another queuing, so the device has work while the host waits and fills the mask."""
    _, reads, _ = _run(monkeypatch)
    late = reads.reads_with_nothing_queued_since()
    assert not late, [reads.events[i - 2:i + 1] for i in late]


def test_logprob_rows_read_only_what_their_steps_queued(monkeypatch):
    """A logprob row's arrays are queued with its step and read whole, like its token."""
    h, reads, rows = _run(monkeypatch, logprobs=3)
    assert reads.new_op_reads() == 0
    log = rows[2].token_log
    assert [t.token_id for t in log] == h.seqs[2].output_ids
    assert all(t.top[0][0] == t.token_id and len(t.top) == 3 for t in log)   # greedy


def test_plain_rows_decode_the_same_beside_a_constrained_row():
    constrained, _, _ = _run(constrained=True)
    plain, _, _ = _run(constrained=False)
    for rid in (1, 2):
        assert constrained.seqs[rid].output_ids == plain.seqs[rid].output_ids
    assert constrained.seqs[0].output_ids != plain.seqs[0].output_ids
