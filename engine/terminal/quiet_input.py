"""Keys typed while a reply streams: neither echoed into the reply nor sent afterwards.

The terminal echoes what is typed at any time, so without this a key pressed during a
reply lands in the middle of the model's text, and the line it made is read as the next
message once the reply ends. While a reply streams, echo is off (Ctrl-C still signals:
ISIG stays on); at the end the attributes come back with TCSAFLUSH, which also drops
the typed-ahead input. Not a terminal (a pipe, a test, Windows): nothing changes.
"""
from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import TextIO

try:
    import termios
except ImportError:                     # Windows: no termios, no change
    termios = None


@contextlib.contextmanager
def quiet_input(stream: TextIO | None = None) -> Iterator[bool]:
    """Echo off on ``stream`` (default stdin) for the block; True if it was a terminal."""
    stream = sys.stdin if stream is None else stream
    fd = _tty_fd(stream)
    if fd is None:
        yield False
        return
    saved = termios.tcgetattr(fd)
    quiet = list(saved)
    quiet[3] &= ~termios.ECHO           # lflag: no echo; ICANON and ISIG as they were
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield True
    finally:
        termios.tcsetattr(fd, termios.TCSAFLUSH, saved)   # and drop the typeahead


def _tty_fd(stream) -> int | None:
    if termios is None:
        return None
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):   # StringIO, closed, replaced
        return None
    return fd if stream.isatty() else None
