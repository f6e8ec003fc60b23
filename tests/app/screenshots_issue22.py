"""Renders what issue 22 items 6-15 changed and saves PNGs into a folder, on the
built-in model: python tests/app/screenshots_issue22.py OUT_DIR (offscreen or Xvfb)."""
from __future__ import annotations

import asyncio
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import qasync  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from app.controllers.bridge import EngineBridge  # noqa: E402
from app.status.activity import DEGRADED_NOTE  # noqa: E402
from app.storage.app_settings import AppSettings  # noqa: E402
from app.storage.conversation import Conversation  # noqa: E402
from app.storage.message import Message, MessageState  # noqa: E402
from app.storage.store import Store  # noqa: E402
from app.style import apply_style  # noqa: E402
from app.windows.main_window import MainWindow  # noqa: E402

CODE = ("Here is the call:\n\n```python\nresult = client.chat.completions.create(model=\"tandem\","
        " messages=[{\"role\": \"user\", \"content\": \"hello\"}], temperature=0.7, max_tokens=256)\n"
        "print(result)\n```\n\nThe **first** line scrolls sideways.")


async def _idle(session) -> None:
    while session.busy:
        await asyncio.sleep(0.1)


async def shoot(out: str) -> None:
    store = Store(tempfile.mkdtemp())
    store.set_setting("settings", AppSettings().with_chat(max_tokens=48).to_dict())
    window = MainWindow(store, EngineBridge())
    window.resize(1280, 800)
    window.show()
    await asyncio.sleep(0.3)
    assert await window.load_model(None), window.last_error
    first = window.panes.panes()[0]
    first.session.send("Say hello in five words.")
    await _idle(first.session)
    # A chat with Markdown and a long code line, pinned.
    conv = store.create_conversation(Conversation(title="The API call"))
    store.add_message(conv.id, 0, Message("user", "Show me the call"))
    store.add_message(conv.id, 1, Message(
        "assistant", CODE, num_tokens=61, ttft_s=0.41, decode_tok_s=31.2, prompt_tokens=120,
        cached_tokens=96, model="SmolLM2-135M", state=MessageState.STOPPED))
    window.open_conversation(conv.id, new_pane=True)
    window.sessions.set_pinned(conv.id, True)
    third = window.new_conversation(True)
    window.broadcast_prompt("Count from one to twenty.")
    await asyncio.sleep(1.5)
    window.status_panel.per_conversation.setText("Count from one  14.2 tok/s\n" + DEGRADED_NOTE)
    window.grab().save(os.path.join(out, "issue22-three-panes.png"))
    await _idle(first.session)
    await _idle(third.session)
    # Edit the first question: its old branch stays as version 1/2.
    first.session.edit_and_resend(0, "Say goodbye in five words.")
    await _idle(first.session)
    window.grab().save(os.path.join(out, "issue22-edited.png"))
    window.appearance.apply("light", 19)
    await asyncio.sleep(0.3)
    window.appearance.apply("light", 13)
    await asyncio.sleep(0.3)
    window.grab().save(os.path.join(out, "issue22-after-font-19-13.png"))
    dialog = window.show_shortcuts()
    await asyncio.sleep(0.2)
    dialog.grab().save(os.path.join(out, "issue22-shortcuts.png"))
    dialog.close()
    window.close()
    store.close()


def main() -> None:
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out, exist_ok=True)
    app = QApplication.instance() or QApplication(sys.argv[:1])
    apply_style(app, "light")
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    with loop:
        loop.run_until_complete(shoot(out))


if __name__ == "__main__":
    main()
