"""Syntax colours for a code block: Pygments lexes the whole block (strings and
comments can span lines) and the theme's Pygments style gives the colours.

The text stays plain (copy, wrapping and streaming are untouched); this only
formats it. Pygments counts code points, Qt counts UTF-16 units: spans are moved
over for characters outside the BMP (emoji in a string or comment)."""
from __future__ import annotations

from functools import lru_cache

from pygments.lexers import get_lexer_by_name
from pygments.lexers.special import TextLexer
from pygments.styles import get_style_by_name
from pygments.util import ClassNotFound
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
    def __init__(self, document):
        super().__init__(document)
        self.language = ""
        self.style_name = ""
        self._cache: tuple[str, str, list] = ("", "", [])

    def set_language(self, language: str) -> None:
        if language != self.language:
            self.language = language
            self.rehighlight()

    def update_theme(self) -> None:
        """Recolour after a theme change (CodeBlock calls this on StyleChange)."""
        style = theme_colors(current_theme())["pygments"]
        if style != self.style_name:
            self.style_name = style
            self.rehighlight()

    def _spans(self) -> list:
        text = self.document().toPlainText()
        if self._cache[:2] != (text, self.language):
            self._cache = (text, self.language, spans(text, self.language))
        return self._cache[2]

    # Qt overrides
    def highlightBlock(self, text: str) -> None:
        if not self.style_name:
            self.style_name = theme_colors(current_theme())["pygments"]
        formats = _formats(self.style_name)
        start = self.currentBlock().position()
        end = start + self.currentBlock().length()
        for begin, length, token in self._spans():
            if begin + length <= start or begin >= end:
                continue
            while token not in formats and token.parent is not None:
                token = token.parent
            fmt = formats.get(token)
            if fmt is not None and fmt.foreground().style() != 0:
                self.setFormat(max(begin, start) - start,
                               min(begin + length, end) - max(begin, start), fmt)
