"""`python -m app --self-test`: the real window (offscreen) sends a prompt in
two panes at once, waits for both, and checks that the engine batched them."""
from __future__ import annotations

import asyncio
import tempfile
import time

from app.controllers.bridge import EngineBridge, default_loader
from app.storage.message import MessageState
from app.storage.store import Store
from app.windows.main_window import MainWindow

PROMPT = "Count from one to twenty, one number per line."
MAX_TOKENS = 16
TIMEOUT_S = 300


async def _wait_idle(sessions, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while any(s.busy for s in sessions):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def run_self_test(model: str | None, loader=default_loader) -> tuple[int, str]:
    """Returns (exit code, the one summary line)."""
    with tempfile.TemporaryDirectory(prefix="tandem-self-test-") as folder:
        store = Store(folder)
        bridge = EngineBridge(loader)
        window = MainWindow(store, bridge)
        try:
            window.show()
            return await _exercise(window, model)
        finally:
            window.close()
            bridge.close()
            store.close()


async def _exercise(window: MainWindow, model: str | None) -> tuple[int, str]:
    if not await window.load_model(model):
        return 1, f"self-test failed: model did not load: {window.last_error}"
    window.settings = window.settings.with_chat(max_tokens=MAX_TOKENS, temperature=0.0)
    for pane in window.panes.panes():
        window.close_pane(pane)
    panes = [window.new_conversation(True) for _ in range(2)]
    stats = window.status_panel.stats
    stats.reset_max()
    t0 = time.perf_counter()
    for pane in panes:
        pane.composer.setPlainText(PROMPT)
        pane.composer.submit()
    sessions = [p.session for p in panes]
    if not await _wait_idle(sessions, TIMEOUT_S):
        return 1, f"self-test failed: no answer within {TIMEOUT_S} s"
    elapsed = time.perf_counter() - t0
    replies = [s.model.message(s.model.last_row()) for s in sessions]
    bad = [r for r in replies if r.role != "assistant"
           or r.state not in (MessageState.DONE, MessageState.LENGTH) or not r.num_tokens]
    if bad:
        return 1, f"self-test failed: reply ended as {bad[0].state} {bad[0].error}".rstrip()
    if stats.max_batch_size < 2:
        return 1, (f"self-test failed: max batch size {stats.max_batch_size} "
                   f"(the two panes were not decoded together)")
    tokens = sum(r.num_tokens for r in replies)
    return 0, (f"self-test ok: model={window.bridge.model_name}, 2 panes, "
               f"max batch {stats.max_batch_size}, {tokens} tokens in {elapsed:.1f} s")
