"""`python -m engine chat`: slash commands stay in the CLI, replies say why they
stopped, history is saved, --help is plain and complete. Scripted input, a tiny
engine for real replies and a fake one only where a Ctrl-C must land mid-reply."""
from __future__ import annotations

import argparse
import io

import pytest
from tiny_models import write_tiny_llama

from engine import Engine, EngineConfig, SamplingParams
from engine.__main__ import build_parser
from engine.events import FinishedEvent, RequestStats, TokenEvent
from engine.terminal.chat_repl import HELP, ChatRepl
from engine.terminal.line_history import LineHistory


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    folder = write_tiny_llama(tmp_path_factory.mktemp("tiny") / "llama")
    with Engine.load(folder, EngineConfig(num_pages=64, page_size=4, max_context=200)) as e:
        yield e


class Recording:
    """The real engine, noting every conversation sent to it."""

    def __init__(self, engine):
        self.engine, self.sent = engine, []
        self.model_name = engine.model_name

    def submit(self, messages, sampling):
        self.sent.append([dict(m) for m in messages])
        return self.engine.submit(messages, sampling)


def scripted(lines):
    """input() replacement: the lines in order, then Ctrl-D."""
    it = iter(lines)

    def read_line(prompt):
        try:
            return next(it)
        except StopIteration:
            raise EOFError from None
    return read_line, it


def run(engine, lines, max_tokens=2, system=None):
    rec, out = Recording(engine), io.StringIO()
    read_line, rest = scripted(lines)
    repl = ChatRepl(rec, SamplingParams(max_tokens=max_tokens), system=system,
                    read_line=read_line, out=out, err=io.StringIO())
    code = repl.run()
    return repl, rec, out.getvalue(), list(rest), code


def test_slash_commands_are_not_sent_to_the_model(engine):
    repl, rec, out, rest, code = run(engine, [
        "/help", "hello", "/system Be brief.", "/system", "hi", "/new", "//etc",
        "/bogus", "", "/quit", "never read"])
    assert code == 0 and rest == ["never read"]
    assert HELP in out and "Unknown command /bogus" in out and "'Be brief.'" in out
    roles = [[(m["role"], m["content"]) for m in conv if m["role"] != "assistant"]
             for conv in rec.sent]
    assert roles == [[("user", "hello")],
                     [("system", "Be brief."), ("user", "hi")],
                     [("system", "Be brief."), ("user", "/etc")]]


def test_conversation_keeps_replies_and_reset_forgets_them(engine):
    repl, rec, out, _, _ = run(engine, ["one", "two", "/reset", "three"])
    assert [len(conv) for conv in rec.sent] == [1, 3, 1]
    assert rec.sent[1][1]["role"] == "assistant"
    assert [m["content"] for m in repl.messages if m["role"] == "user"] == ["three"]


def test_reply_cut_by_max_tokens_is_marked(engine):
    repl, rec, out, _, _ = run(engine, ["hello world"], max_tokens=2)
    reply = repl.messages[-1]["content"]
    assert out.count("[stopped: max tokens reached (2)") == 1
    assert reply and reply in out


def test_system_dash_removes_the_system_prompt(engine):
    repl, rec, out, _, _ = run(engine, ["/system -", "/system", "hi"], system="S")
    assert "System prompt removed" in out and "No system prompt" in out
    assert rec.sent == [[{"role": "user", "content": "hi"}]]


def test_ctrl_c_at_the_prompt_keeps_the_chat_and_eof_leaves(engine):
    calls = iter([KeyboardInterrupt, "/help"])

    def read_line(prompt):
        item = next(calls, EOFError)
        if isinstance(item, type):
            raise item
        return item
    out = io.StringIO()
    repl = ChatRepl(Recording(engine), SamplingParams(max_tokens=2), read_line=read_line,
                    out=out, err=io.StringIO())
    assert repl.run() == 0
    assert "(/quit or Ctrl-D leaves)" in out.getvalue() and HELP in out.getvalue()


def _stats(n):
    return RequestStats(prompt_tokens=3, generated_tokens=n, ttft_s=0.0, decode_tok_s=0.0)


class InterruptedHandle:
    """Streams "Hel", then the user presses Ctrl-C; after cancel the engine sends
    one more delta and the cancelled FinishedEvent."""

    def __init__(self):
        self.cancelled = False
        self._events = iter([TokenEvent(1, "Hel", (1,)), KeyboardInterrupt])

    def __iter__(self):
        return self

    def __next__(self):
        ev = next(self._events)
        if ev is KeyboardInterrupt:
            raise KeyboardInterrupt
        return ev

    def cancel(self):
        self.cancelled = True
        self._events = iter([TokenEvent(1, "lo", (2,)),
                             FinishedEvent(1, "cancelled", _stats(2), text="Hello")])


class FakeEngine:
    model_name = "fake"

    def __init__(self):
        self.handles = []

    def submit(self, messages, sampling):
        self.handles.append(InterruptedHandle())
        return self.handles[-1]


def test_ctrl_c_stops_the_reply_and_keeps_what_came():
    fake, out = FakeEngine(), io.StringIO()
    read_line, _ = scripted(["hi"])
    repl = ChatRepl(fake, SamplingParams(max_tokens=50), read_line=read_line, out=out,
                    err=io.StringIO())
    repl.run()
    assert fake.handles[0].cancelled
    assert "Hello\n[stopped]" in out.getvalue()
    assert repl.messages[-1] == {"role": "assistant", "content": "Hello"}


@pytest.mark.parametrize("reason, generated, marker", [
    ("stop", 3, ""),
    ("cancelled", 3, "[stopped]"),
    ("length", 8, "[stopped: max tokens reached (8)"),
    ("length", 5, "[stopped: the conversation filled the context"),
])
def test_stop_marker_says_why(reason, generated, marker):
    repl = ChatRepl(FakeEngine(), SamplingParams(max_tokens=8), out=io.StringIO())
    got = repl.stop_marker(FinishedEvent(1, reason, _stats(generated)))
    assert got.startswith(marker) and bool(got) == bool(marker)


def test_history_is_saved_and_read_back(tmp_path):
    readline = pytest.importorskip("readline")
    path = tmp_path / "sub" / "chat_history"
    readline.clear_history()
    history = LineHistory(path)
    readline.add_history("what is a KV cache?")
    history.close()
    assert "what is a KV cache?" in path.read_text()
    readline.clear_history()
    LineHistory(path)
    assert readline.get_history_item(readline.get_current_history_length()) == \
        "what is a KV cache?"
    readline.clear_history()


def test_help_is_plain_and_every_option_says_what_it_does(capsys):
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    chat = sub.choices["chat"]
    assert all(a.help for a in chat._actions)
    with pytest.raises(SystemExit):
        parser.parse_args(["chat", "--help"])
    text = capsys.readouterr().out
    assert "``" not in text and "(default: 1024)" in text and "(default: 0.0)" in text
    assert "(default: None)" not in text and "(default: False)" not in text


def test_chat_starts_as_the_apps_new_conversation_and_generate_as_the_engine(capsys):
    """Both sets of defaults come from engine/settings_spec.py, and --help says why."""
    from engine.settings_spec import BY_NAME, SAMPLING
    parser = build_parser()
    chat = parser.parse_args(["chat"])
    gen = parser.parse_args(["generate", "--prompt", "x"])
    for s in SAMPLING:
        assert getattr(chat, s.name) == s.chat_default and getattr(gen, s.name) == s.default
    assert chat.system == BY_NAME["system_prompt"].chat_default
    assert (chat.temperature, chat.max_tokens, gen.temperature, gen.max_tokens) == (
        0.7, 1024, 0.0, 512)
    with pytest.raises(SystemExit):
        parser.parse_args(["generate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "greedy, so the same prompts give the same output" in text


def test_a_streaming_reply_turns_echo_off_and_drops_what_was_typed():
    """On a real terminal (a pty): no echo while the reply streams, Ctrl-C still a
    signal; afterwards echo is back and the keys typed meanwhile are gone."""
    import os
    import pty
    import select
    import termios

    from engine.terminal.quiet_input import quiet_input
    master, slave = pty.openpty()
    try:
        with os.fdopen(slave, "r", closefd=False) as tty:
            before = termios.tcgetattr(slave)
            assert before[3] & termios.ECHO
            with quiet_input(tty) as quiet:
                assert quiet
                flags = termios.tcgetattr(slave)[3]
                assert not flags & termios.ECHO and flags & termios.ISIG
                os.write(master, b"typed during the reply\n")
                select.select([slave], [], [], 1.0)       # the line reached the tty
            assert termios.tcgetattr(slave) == before
            assert select.select([slave], [], [], 0.1)[0] == []   # typeahead dropped
            echoed = select.select([master], [], [], 0.1)[0]
            assert not echoed or b"typed" not in os.read(master, 1024)
    finally:
        os.close(master)
        os.close(slave)


def test_quiet_input_leaves_a_pipe_alone():
    from engine.terminal.quiet_input import quiet_input
    with quiet_input(io.StringIO()) as quiet:
        assert quiet is False
