"""Syntax colours for a code block: Pygments lexes the whole block (strings and
comments can span lines) and the theme's Pygments style gives the colours.

The text stays plain (copy, wrapping and streaming are untouched); this only
formats it. Pygments counts code points, Qt counts UTF-16 units: spans are moved
over for characters outside the BMP (emoji in a string or comment)."""
from __future__ import annotations

import time
from bisect import bisect_right
from functools import lru_cache

from pygments.lexers import get_lexer_by_name
from pygments.lexers.special import TextLexer
from pygments.styles import get_style_by_name
from pygments.util import ClassNotFound
from PySide6.QtCore import QTimer
from PySide6.QtGui import QColor, QFont, QSyntaxHighlighter, QTextCharFormat

from app.style import current_theme, theme_colors

_ALIASES = {"py": "python", "js": "javascript", "ts": "typescript", "sh": "bash",
            "shell": "bash", "zsh": "bash", "c++": "cpp", "objc": "objective-c",
            "yml": "yaml", "md": "markdown", "rs": "rust", "golang": "go"}


@lru_cache(maxsize=64)
def lexer_for(language: str):
    """The Pygments lexer for a fence's language ('python', 'py', 'C++'); plain text
    for an unknown or missing one."""
    name = language.strip().lower()
    try:
        return get_lexer_by_name(_ALIASES.get(name, name), stripnl=False, ensurenl=False)
    except ClassNotFound:
        return TextLexer()


@lru_cache(maxsize=4)
def _formats(style_name: str) -> dict:
    """token type -> QTextCharFormat for a Pygments style."""
    style = get_style_by_name(style_name)
    formats = {}
    for token, spec in style:
        fmt = QTextCharFormat()
        if spec["color"]:
            fmt.setForeground(QColor("#" + spec["color"]))
        if spec["bold"]:
            fmt.setFontWeight(QFont.Weight.Bold)
        if spec["italic"]:
            fmt.setFontItalic(True)
        formats[token] = fmt
    return formats


def spans(code: str, language: str) -> list[tuple[int, int, object]]:
    """(start, length, token type) in UTF-16 units, for every coloured token."""
    out, shift = [], 0
    wide = any(ord(ch) > 0xFFFF for ch in code)
    for index, token, value in lexer_for(language).get_tokens_unprocessed(code):
        length = len(value)
        if wide:
            extra = sum(1 for ch in value if ord(ch) > 0xFFFF)
            out.append((index + shift, length + extra, token))
            shift += extra
        else:
            out.append((index, length, token))
    return out


class CodeHighlighter(QSyntaxHighlighter):
    """Lexes the whole block when its text changes, but when a lex is slow (a long
    block), not again before four times its duration has passed: a long block
    streaming in costs the GUI thread at most a fifth of its time, and its newest
    lines take their colours on the next lex. Qt re-colours only the lines that changed; when a lex
    changes earlier lines' tokens too (a string that opened above), all are redone."""
    FREE_MS = 5           # a lex faster than this never makes the next one wait

    def __init__(self, document):
        super().__init__(document)
        self.language = ""
        self.style_name = ""
        self._revision = None
        self._text = None
        self._spans: list = []
        self._starts: list[int] = []
        self._interval_ms = 0.0
        self._last_lex = -1e9
        self._timer = QTimer(self, singleShot=True)
        self._timer.timeout.connect(self._on_timer_timeout)

    def set_language(self, language: str) -> None:
        if language != self.language:
            self.language = language
            self._text = None
            self._last_lex = -1e9
            self.rehighlight()

    def update_theme(self) -> None:
        """Recolour after a theme change (CodeBlock calls this on StyleChange)."""
        style = theme_colors(current_theme())["pygments"]
        if style != self.style_name:
            self.style_name = style
            self.rehighlight()

    def _lex(self) -> int | None:
        """Lex the text now; the first position whose tokens changed (None: none)."""
        text = self.document().toPlainText()
        if text == self._text:
            return None
        lexer_for(self.language)          # found and compiled once, not timed below
        started = time.perf_counter()
        new = spans(text, self.language) if self.language else []
        self._last_lex = time.perf_counter()
        took_ms = 1000 * (self._last_lex - started)
        self._interval_ms = 4 * took_ms if took_ms > self.FREE_MS else 0.0
        same = next((i for i, (a, b) in enumerate(zip(self._spans, new)) if a != b),
                    min(len(self._spans), len(new)))
        self._text, self._spans, self._starts = text, new, [s[0] for s in new]
        return new[same][0] if same < len(new) else None

    def _maybe_lex(self, block_start: int) -> None:
        """Lex now if the interval has passed, else once it has."""
        doc = self.document()
        key = (doc.revision(), doc.characterCount())   # setPlainText: clear, fill, one revision
        if key == self._revision:
            return
        self._revision = key
        wait_ms = self._interval_ms - 1000 * (time.perf_counter() - self._last_lex)
        if wait_ms > 0:
            if not self._timer.isActive():
                self._timer.start(int(wait_ms) + 1)
            return
        changed = self._lex()
        if changed is not None and changed < block_start:
            QTimer.singleShot(0, self.rehighlight)      # earlier lines' tokens changed

    # slots
    def _on_timer_timeout(self) -> None:
        if self._lex() is not None:
            self.rehighlight()

    # Qt overrides
    def highlightBlock(self, text: str) -> None:
        if not self.style_name:
            self.style_name = theme_colors(current_theme())["pygments"]
        start = self.currentBlock().position()
        self._maybe_lex(start)
        formats, end = _formats(self.style_name), start + len(text)
        i = max(0, bisect_right(self._starts, start) - 1)
        while i < len(self._spans) and self._spans[i][0] < end:
            begin, length, token = self._spans[i]
            i += 1
            if begin + length <= start:
                continue
            while token not in formats and token.parent is not None:
                token = token.parent
            fmt = formats.get(token)
            if fmt is not None and fmt.foreground().style() != 0:
                self.setFormat(max(begin, start) - start,
                               min(begin + length, end) - max(begin, start), fmt)
