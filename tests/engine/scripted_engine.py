"""A scripted clock for the reading-pace policy: a fake runner gives every step its cost
(calm decode seconds + prompt tokens / prompt rate, or a scripted mixed-step cost) and the
budget learns from those, as the step loop's would; the scheduler plans from the budget.
The policy tests (test_prefill_policy.py, test_prefill_policy_hiccups.py) drive it."""
from engine.cache.cache_manager import CacheManager
from engine.config import EngineConfig
from engine.core.prefill_budget import BURST, PrefillBudget
from engine.core.scheduler import Scheduler
from engine.core.sequence import Sequence

FLOOR_S = 1 / 15


class ScriptedEngine:
    """The step loop's planning with a fake runner whose step costs are scripted."""

    def __init__(self, decode_s, prefill_tok_s, chunk=2048, turn=4, mixed_fixed_s=0.0,
                 mixed_tok_s=None, mixed_cost=None, slowdown=0.25, pipelined=True,
                 alone_fixed_s=0.0, own_max_s=None):
        """mixed_fixed_s, mixed_tok_s: a chunk beside decode rows costs a fixed part plus
        its tokens at this rate (default: the alone prefill_tok_s, no fixed part).
        alone_fixed_s: a step that reads a prompt alone costs this plus its tokens at
        prefill_tok_s (a chunk beside decode rows is never much cheaper than alone: the
        policy's predictions are floored by half the alone cost, mixed_step_cost.py).
        pipelined: step n is planned before step n-1 is read back, as the step loop runs
        by default; False: in lock-step (the loop with a repetition penalty), where the
        learning rule shows step by step (pipelined, a length's first reading arrives
        after the next step was planned, so each new length is read twice).
        own_max_s: a mixed step's chunk takes at most this long in its own step and the
        rest of its cost lands in the next step (its tail, engine/core/chunk_tails.py), as
        on a GPU where the host queues the next step while the device still runs it."""
        self.pipelined = pipelined
        self.decode_s, self.prefill_tok_s = decode_s, prefill_tok_s
        self.mixed_fixed_s, self.mixed_tok_s = mixed_fixed_s, mixed_tok_s or prefill_tok_s
        self.mixed_cost = mixed_cost    # tokens -> seconds above the calm step, if given
        self.alone_fixed_s = alone_fixed_s
        cfg = EngineConfig(max_num_seqs=16, page_size=16, num_pages=4096, prefill_chunk=chunk,
                           max_context=8192, prefill_turn_chunks=turn)
        self.sched = Scheduler(cfg, CacheManager(4096, 16, 16, keep_turns=None,
                                                 exact_prefix_only=False))
        self.budget = PrefillBudget(chunk, cfg.min_stream_tok_s, slowdown)
        self.now = 0.0
        self.steps = []                      # (plan, seconds, allowance)
        self.first_token: dict[int, float] = {}
        self.arrival: dict[int, int] = {}    # request id -> step count when it arrived
        self.in_flight = None                # (seconds, decode rows, prompt tokens) unread
        self.own_max_s = own_max_s
        self.carried_s = 0.0                 # the last chunk's tail, due in the next step

    def add(self, rid, n_prompt):
        self.arrival[rid] = len(self.steps)
        self.sched.add(Sequence(rid, list(range(n_prompt))))

    def step(self):
        """One step as the step loop runs it (engine/core/step_loop.py): step n is planned
        and queued before step n-1 is read back, so the budget learns one step late."""
        decoding = any(not s.is_prefilling for s in self.sched.running)
        allowance = self.budget.allowance(decoding, self.sched.prompt_tokens_left())
        plan = self.sched.schedule(allowance.tokens)
        seconds = self._cost(plan) + self.carried_s
        self.carried_s = 0.0
        if self.own_max_s is not None and plan.decode and plan.prefills:
            self.carried_s = max(seconds - self.decode_s - self.own_max_s, 0.0)
            seconds -= self.carried_s
        for s in plan.decode:
            s.num_computed = s.num_tokens
            s.output_ids.append(7)
        self.now += seconds
        for c in plan.prefills:
            c.seq.num_computed = c.start + c.num_tokens
            if c.is_last:
                c.seq.output_ids.append(7)
                self.first_token[c.seq.request_id] = self.now
        self.budget.queued(len(plan.decode), plan.prefill_tokens)
        if self.in_flight is not None:
            self.budget.observe(*self.in_flight)
        self.in_flight = (seconds, len(plan.decode), plan.prefill_tokens)
        if not self.pipelined:
            self.budget.observe(*self.in_flight)
            self.in_flight = None
        self.steps.append((plan, seconds, allowance))
        return plan

    def _cost(self, plan) -> float:
        if plan.decode and plan.prefills and self.mixed_cost:
            return self.decode_s + self.mixed_cost(plan.prefill_tokens)
        if plan.decode and plan.prefills:
            return self.decode_s + self.mixed_fixed_s + plan.prefill_tokens / self.mixed_tok_s
        if not plan.decode and plan.prefill_tokens:
            return self.alone_fixed_s + plan.prefill_tokens / self.prefill_tok_s
        return self.decode_s

    def streams(self, n=7):
        """n conversations streaming, the budget warmed up on them."""
        for rid in range(n):
            self.add(rid, 64)
        for _ in range(6):
            self.step()
        assert all(not s.is_prefilling for s in self.sched.running)

    def read(self, rid, n_prompt):
        """Add a prompt and step until its first token; the steps taken meanwhile."""
        start = len(self.steps)
        self.add(rid, n_prompt)
        while rid not in self.first_token:
            self.step()
        return self.steps[start:]


def mixed(steps):
    return [(p, sec, a) for p, sec, a in steps if p.decode and p.prefills]


def assert_reading_pace(steps, probe_steps=0):
    """The streams' promise while a prompt is read (engine/core/prefill_budget.py): every
    step within (1 + BURST) x the floor (a probe's within 2x), never two steps over the
    floor in a row, and the steps' time over the floor no more than the bank held when
    the prompt came (BURST x the floor): the streams' average pace holds the floor."""
    gaps = [sec for p, sec, _ in steps if p.decode]
    over = [sec for sec in gaps if sec > (1 + BURST) * FLOOR_S + 1e-9]
    assert len(over) <= probe_steps and all(sec <= 2 * FLOOR_S for sec in over), over
    assert not any(a > FLOOR_S + 1e-9 and b > FLOOR_S + 1e-9 for a, b in zip(gaps, gaps[1:]))
    assert sum(sec - FLOOR_S for sec in gaps) <= BURST * FLOOR_S + 1e-9


def run_plan(plan) -> None:
    """What the runner does with a plan: a decode row appends one token; a prompt's last
    chunk samples its first."""
    for s in plan.decode:
        s.num_computed = s.num_tokens
        s.output_ids.append(7)
    for c in plan.prefills:
        c.seq.num_computed = c.start + c.num_tokens
        if c.is_last:
            c.seq.output_ids.append(7)


class HostAndDevice(ScriptedEngine):
    """A pipelined GPU with a host and a device clock, as the step loop drives one
    (engine/core/step_loop.py): the host queues step k (host_s(kind, tokens) seconds),
    then waits for step k-1's device work to end and reads it back, then plans step k+1;
    the device runs each step's device_s after the one before, from a share `starts_at`
    into its queuing (MLX commits CUDA graphs while a step is being queued). A step that
    queues more than `backlog_s(tokens)` of device work ahead of the device waits in its
    own queuing for the rest (MLX holds a few graphs in flight at most). So a step's
    cadence (what the budget reads and what a stream sees between tokens) is its own
    queuing or the end of the step before on the device, whichever is later: a chunk's
    device time lands in its own step, in the next, or split between them, by what is
    in flight (kind: "decode", "mixed" or "alone")."""

    def __init__(self, host_s, device_s, backlog_s, starts_at=0.3, **kw):
        super().__init__(**kw)
        self.host_s, self.device_s, self.backlog_s = host_s, device_s, backlog_s
        self.starts_at = starts_at
        self.t0 = 0.0               # when the host started queuing the step to plan next
        self.device_end = 0.0       # when the device ends the step queued last
        self.queued_step = None     # (plan, allowance, t0) queued and not yet read back

    def step(self):
        decoding = any(not s.is_prefilling for s in self.sched.running)
        allowance = self.budget.allowance(decoding, self.sched.prompt_tokens_left())
        plan = self.sched.schedule(allowance.tokens)
        kind = ("mixed" if plan.decode and plan.prefills
                else "decode" if plan.decode else "alone")
        host_s = self.host_s(kind, plan.prefill_tokens)
        start = max(self.t0 + self.starts_at * host_s, self.device_end)
        end = start + self.device_s(kind, plan.prefill_tokens)
        queued_at = max(self.t0 + host_s, end - self.backlog_s(plan.prefill_tokens))
        run_plan(plan)
        self.budget.queued(len(plan.decode), plan.prefill_tokens)
        read_back = max(queued_at, self.device_end)     # the step before, read back
        if self.queued_step is not None:
            before, before_allowance, before_t0 = self.queued_step
            self.budget.observe(self.t0 - before_t0, len(before.decode), before.prefill_tokens)
            self.steps.append((before, self.t0 - before_t0, before_allowance))
            for c in before.prefills:
                if c.is_last:
                    self.first_token[c.seq.request_id] = read_back
        self.queued_step = (plan, allowance, self.t0)
        self.device_end, self.t0 = end, read_back
        self.now = read_back
        return plan
