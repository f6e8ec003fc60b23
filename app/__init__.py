"""Tandem's desktop UI (PySide6). The only package that imports Qt."""
from app.qt_compat import immortalize_singletons

immortalize_singletons()      # before any Qt call: see qt_compat
