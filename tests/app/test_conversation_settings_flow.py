"""A new conversation starts from the app settings' chat defaults (every spec
setting, not just four), keeps them in the store, and sends them to the engine."""
from __future__ import annotations

from engine.settings_spec import settings_summary


def test_new_conversation_sends_every_setting(make_window, wait_until):
    window = make_window(max_tokens=6)
    window.settings = window.settings.with_chat(top_k=3, min_p=0.05, seed=42,
                                                repetition_penalty=1.2,
                                                system_prompt="Be terse.")
    sent = []
    submit = window.bridge.submit
    window.bridge.submit = lambda prompt, params: sent.append((prompt, params)) or \
        submit(prompt, params)
    pane = window.new_conversation(True)
    summary = settings_summary(pane.session.conversation.settings)
    assert summary == "temp 0 · top-p 0.95 · max tokens 6"
    assert pane.subtitle.text().startswith("temp 0")        # elided to the pane's width
    assert pane.session.send("hi")
    [(prompt, params)] = sent
    assert prompt[0] == {"role": "system", "content": "Be terse."}
    assert (params.top_k, params.min_p, params.seed, params.repetition_penalty,
            params.max_tokens, params.temperature) == (3, 0.05, 42, 1.2, 6, 0.0)
    wait_until(lambda: not pane.session.busy)
    stored = window.store.conversation(pane.session.conversation.id)
    assert stored.settings == pane.session.conversation.settings
    assert stored.settings["seed"] == 42 and stored.system_prompt == "Be terse."
