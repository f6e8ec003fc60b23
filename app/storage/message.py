"""One chat message and its generation stats (plain data, no Qt)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace


class MessageState:
    """What happened to a message; assistant messages move through these."""
    DONE = "done"              # finished normally (EOS / stop string)
    STREAMING = "streaming"    # tokens still arriving
    STOPPED = "stopped"        # the user pressed stop
    LENGTH = "length"          # hit max tokens
    INTERRUPTED = "interrupted"  # the app quit while it streamed
    ERROR = "error"            # the engine failed; content holds what came


# A reply cut short (stopped, at max tokens, by a quit) that Continue can carry on.
CONTINUABLE = (MessageState.STOPPED, MessageState.LENGTH, MessageState.INTERRUPTED)


@dataclass
class Message:
    role: str                              # "user" | "assistant"
    content: str = ""
    state: str = MessageState.DONE
    id: int | None = None                  # row id in the store
    ttft_s: float | None = None
    decode_tok_s: float | None = None
    num_tokens: int | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None       # prompt tokens reused from the prompt cache
    model: str = ""
    error: str = ""
    created_at: float = field(default_factory=time.time)
    # Regenerated answers: every version (see message_versions.py) and the one shown.
    versions: list[dict] = field(default_factory=list)
    version: int = 0

    @property
    def is_streaming(self) -> bool:
        return self.state == MessageState.STREAMING

    def copy(self, **changes) -> Message:
        return replace(self, **changes)
