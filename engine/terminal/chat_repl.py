"""The terminal chat behind `python -m engine chat`: slash commands handled here
(never sent to the model), streamed replies that say why they stopped, and line
editing with a saved history (engine/terminal/line_history.py)."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from engine import Engine, SamplingParams, TandemError
from engine.events import ErrorEvent, FinishedEvent
from engine.settings_spec import BY_NAME
from engine.terminal.line_history import LineHistory, default_history_path
from engine.terminal.quiet_input import quiet_input

HELP = """\
Commands (any other line is sent to the model):
  /help            this list
  /new, /reset     start a new conversation (the system prompt stays)
  /system TEXT     set the system prompt and start a new conversation
  /system          show the system prompt; "/system -" removes it
  /quit, /exit     leave (Ctrl-D does too)
Start a line with // to send text that begins with "/".
Ctrl-C stops a reply (what came so far is kept); Up/Down recall earlier lines.
Keys typed while a reply streams are dropped, not sent."""

PROMPT = "> "


def add_chat_args(p: argparse.ArgumentParser) -> None:
    """The chat's own options (the model and sampling options come from engine.terminal.cli)."""
    p.add_argument("--system", default=BY_NAME["system_prompt"].chat_default or None,
                   help=BY_NAME["system_prompt"].help + " (change it with /system; "
                   "--system - for none)")
    p.add_argument("--history", type=Path, default=default_history_path(),
                   help="file that keeps the lines you typed, for Up/Down")
    p.add_argument("--no-history", action="store_true",
                   help="neither read nor save the history file")


class ChatRepl:
    """One terminal conversation: read a line, run a command or send it, stream the reply."""

    def __init__(self, engine: Engine, sampling: SamplingParams, system: str | None = None,
                 read_line: Callable[[str], str] = input,
                 out: TextIO | None = None, err: TextIO | None = None,
                 stdin: TextIO | None = None):
        self.engine = engine
        self.sampling = sampling
        self.system = system
        self.messages: list[dict] = []
        self._read_line = read_line
        self._out = out or sys.stdout
        self._err = err or sys.stderr
        self._stdin = stdin                    # None: sys.stdin when a reply streams
        self.reset()

    def reset(self) -> None:
        self.messages = [{"role": "system", "content": self.system}] if self.system else []

    def run(self) -> int:
        """Read lines until /quit or Ctrl-D."""
        self._say(f"Chatting with {self.engine.model_name}. /help lists the commands; "
                  "/quit or Ctrl-D leaves.")
        while True:
            try:
                line = self._read_line(PROMPT)
            except EOFError:
                self._say("")
                return 0
            except KeyboardInterrupt:           # like a shell: drop the line, stay
                self._say("\n(/quit or Ctrl-D leaves)")
                continue
            if not self.handle(line):
                return 0

    def handle(self, line: str) -> bool:
        """Act on one typed line; False when the user asked to leave."""
        text = line.strip()
        if not text:
            return True
        if text.startswith("/") and not text.startswith("//"):
            return self._command(text)
        self.send(text[1:] if text.startswith("//") else text)
        return True

    def _command(self, text: str) -> bool:
        name, _, arg = text.partition(" ")
        name, arg = name.lower(), arg.strip()
        if name in ("/quit", "/exit", "/q"):
            return False
        if name in ("/help", "/?"):
            self._say(HELP)
        elif name in ("/new", "/reset", "/clear"):
            self.reset()
            self._say("New conversation.")
        elif name == "/system":
            self._system(arg)
        else:
            self._say(f"Unknown command {name}. /help lists the commands; "
                      "start the line with // to send it to the model.")
        return True

    def _system(self, arg: str) -> None:
        if not arg:
            self._say(f"System prompt: {self.system!r}" if self.system else
                      "No system prompt. Set one with /system TEXT.")
            return
        self.system = None if arg == "-" else arg
        self.reset()
        self._say(("System prompt set" if self.system else "System prompt removed")
                  + "; new conversation.")

    def send(self, text: str) -> None:
        """Send a user message and stream the reply; the reply joins the conversation."""
        self.messages.append({"role": "user", "content": text})
        try:
            handle = self.engine.submit(list(self.messages), self.sampling)
        except TandemError as e:               # e.g. the conversation outgrew the context
            self.messages.pop()
            print(f"error: {e}", file=self._err)
            return
        reply, reason = self._stream(handle)
        if reason == "error":
            self.messages.pop()
            return
        self.messages.append({"role": "assistant", "content": reply})

    def _stream(self, handle) -> tuple[str, str]:
        """Print the reply as it comes; (its text, why it ended). Ctrl-C stops it.
        Typing meanwhile shows nothing and sends nothing (quiet_input.py)."""
        with quiet_input(self._stdin):
            try:
                return self._print_events(handle)
            except KeyboardInterrupt:
                handle.cancel()
                return self._print_events(handle)      # the rest, up to "cancelled"

    def _print_events(self, handle) -> tuple[str, str]:
        for ev in handle:
            if isinstance(ev, ErrorEvent):
                print(f"\nerror: {ev.message}", file=self._err)
            elif isinstance(ev, FinishedEvent):
                return self._finished(ev), ev.reason
            else:
                self._write(ev.text)
        return "", "error"

    def _finished(self, ev: FinishedEvent) -> str:
        s = ev.stats
        self._say("")
        marker = self.stop_marker(ev)
        if marker:
            self._say(marker)
        reused = (f", reused {s.cached_tokens:,} of {s.prompt_tokens:,} prompt tokens"
                  if s.cached_tokens else "")
        print(f"  [{s.generated_tokens} tokens, {s.decode_tok_s:.1f} tok/s, "
              f"ttft {s.ttft_s * 1000:.0f} ms{reused}]", file=self._err)
        return ev.text

    def stop_marker(self, ev: FinishedEvent) -> str:
        """What to show under a reply that did not end by itself ("" if it did)."""
        if ev.reason == "cancelled":
            return "[stopped]"
        if ev.reason != "length":
            return ""
        if ev.message:                     # the KV cache, not a limit, cut it
            return f"[stopped: {ev.message}]"
        if ev.stats.generated_tokens >= self.sampling.max_tokens:
            return (f"[stopped: max tokens reached ({self.sampling.max_tokens}); "
                    "raise --max-tokens for longer replies]")
        return "[stopped: the conversation filled the context; /new starts over]"

    def _write(self, text: str) -> None:
        self._out.write(text)
        self._out.flush()

    def _say(self, line: str) -> None:
        print(line, file=self._out, flush=True)


def run_chat(args, engine: Engine | None, sampling: SamplingParams) -> int:
    """The chat on a loaded engine (None: loading failed and was reported)."""
    if engine is None:
        return 2
    history = LineHistory(None if args.no_history else args.history)
    try:
        with engine:
            system = None if args.system in (None, "", "-") else args.system
            return ChatRepl(engine, sampling, system=system).run()
    finally:
        history.close()
