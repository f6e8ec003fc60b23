"""Light and dark themes (System follows the OS), the font size, and code blocks
coloured by Pygments in the theme's style, all applied while the app runs."""
from __future__ import annotations

import json
import re

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication

from app.chat.code_highlighter import lexer_for, spans
from app.chat.markdown_view import MarkdownView
from app.storage.app_settings import AppSettings
from app.style import THEMES, current_theme, style_sheet
from app.windows.settings_dialog import SettingsDialog

CODE = '```python\ndef greet(name):\n    return "hi " + name  # say hi\n```\nDone.'


def _color_at(block_widget, line: int, column: int) -> str:
    """The foreground the highlighter gave the character at (line, column)."""
    block = block_widget.text.document().findBlockByNumber(line)
    for fmt in block.layout().formats():
        if fmt.start <= column < fmt.start + fmt.length:
            return fmt.format.foreground().color().name()
    return "none"


def test_both_themes_fill_every_colour_and_scale_fonts():
    light, dark = (json.loads((THEMES / f"{t}.json").read_text()) for t in ("light", "dark"))
    assert light.keys() == dark.keys()
    for theme in ("light", "dark"):
        sheet = style_sheet(theme, 16)
        assert "@" not in re.sub(r"/\*.*?\*/", "", sheet, flags=re.S)
        assert "font-size: 16px" in sheet and "font-size: 13px" not in sheet
    assert "font-size: 14px" in style_sheet("light", 16)     # 11 px captions grow too
    with pytest.raises(ValueError, match="unknown theme"):
        style_sheet("sepia")


def test_appearance_settings_are_checked_and_stored():
    settings = AppSettings(theme="dark", font_size=16)
    assert AppSettings.from_dict(settings.to_dict()) == settings
    with pytest.raises(ValueError, match="theme must be one of"):
        AppSettings(theme="blue")
    with pytest.raises(ValueError, match="font_size"):
        AppSettings(font_size=64)
    kept = AppSettings.from_dict({"theme": "blue", "font_size": 15, "max_num_seqs": 3})
    assert (kept.theme, kept.font_size, kept.max_num_seqs) == ("system", 15, 3)


def test_code_is_highlighted_and_recoloured_for_the_theme(make_window, qtbot):
    window = make_window(load=False)
    window.appearance.apply("light", 13)
    view = MarkdownView()
    qtbot.addWidget(view)
    view.set_markdown(CODE)
    block = view.code_blocks()[0]
    keyword, string, comment = (_color_at(block, 0, 0), _color_at(block, 1, 12),
                                _color_at(block, 1, 27))
    assert len({keyword, string, comment, "none"}) == 4        # three colours
    assert block.code() == 'def greet(name):\n    return "hi " + name  # say hi'
    window.appearance.apply("dark", 13)
    assert current_theme() == "dark"
    assert _color_at(block, 0, 0) not in (keyword, "none")      # github-dark's keyword
    assert QGuiApplication.palette().window().color().lightness() < 64


def test_unknown_language_is_plain_and_emoji_keep_spans_aligned():
    assert lexer_for("no-such-language").name == "Text only"
    assert lexer_for("py").name == "Python"
    text = 's = "🙂"  # ok'
    comment = [(start, n) for start, n, token in spans(text, "python") if "Comment" in str(token)]
    assert comment == [(len(text.encode("utf-16-le")) // 2 - 4, 4)]   # UTF-16 units


def test_settings_dialog_switches_theme_and_font_live(make_window, monkeypatch, wait_until):
    window = make_window(load=False)
    window.appearance.apply("light", 13)
    pane = window.panes.panes()[0]
    before = pane.composer.font().pixelSize()

    def accept(dialog):
        dialog.theme.setCurrentIndex(dialog.theme.findData("dark"))
        dialog.font_size.setValue(17)
        return True
    monkeypatch.setattr(SettingsDialog, "exec", accept)
    window.open_settings_dialog()
    wait_until(lambda: window.settings.theme == "dark")
    assert current_theme() == "dark" and window.appearance.choice == "dark"
    assert pane.composer.font().pixelSize() == 17 != before
    assert AppSettings.from_dict(window.store.get_setting("settings")).font_size == 17
    assert pane.view.palette().window().color() == QColor("#1f2023")


def test_system_choice_follows_the_color_scheme(make_window, monkeypatch):
    window = make_window(load=False)
    hints = QGuiApplication.styleHints()
    scheme = {"now": Qt.ColorScheme.Light}
    monkeypatch.setattr(type(window.appearance), "system_theme",
                        lambda self: "dark" if scheme["now"] == Qt.ColorScheme.Dark else "light")
    window.appearance.apply("system", 13)
    assert current_theme() == "light"
    scheme["now"] = Qt.ColorScheme.Dark
    hints.colorSchemeChanged.emit(Qt.ColorScheme.Dark)         # the OS switched to dark
    assert current_theme() == "dark"
    window.appearance.apply("light", 13)                       # an explicit choice wins
    hints.colorSchemeChanged.emit(Qt.ColorScheme.Dark)
    assert current_theme() == "light"


def _all_formats(block_widget) -> list:
    doc = block_widget.text.document()
    return [[(f.start, f.length, f.format.foreground().color().name())
             for f in doc.findBlockByNumber(i).layout().formats()]
            for i in range(doc.blockCount())]


def test_a_streamed_block_ends_coloured_like_one_set_at_once(qtbot, monkeypatch):
    """Streamed in pieces (a docstring opens, then closes many lines later; slow lexes
    defer the next one), the colours end as if the text had come at once."""
    from app.chat.code_block import CodeBlock
    from app.chat.code_highlighter import CodeHighlighter
    code = "".join(f'def f{i}(x):\n    """doc {i}\n    more"""\n    return x * {i}  # c\n'
                   for i in range(40))
    monkeypatch.setattr(CodeHighlighter, "FREE_MS", -1)     # every lex counts as slow
    streamed, whole = CodeBlock(), CodeBlock()
    qtbot.addWidget(streamed)
    qtbot.addWidget(whole)
    for end in range(7, len(code) + 7, 7):
        streamed.set_code(code[:end], "python")
        qtbot.wait(1)
    whole.set_code(code, "python")
    qtbot.waitUntil(lambda: _all_formats(streamed) == _all_formats(whole), timeout=5000)
    assert len({c for line in _all_formats(whole) for _s, _n, c in line}) >= 4
