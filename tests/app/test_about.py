"""Help > About on the real engine: the version, the loaded model, the engine's
kernel status and the folders where Tandem keeps its data."""
from __future__ import annotations

from PySide6.QtWidgets import QLabel

from app.about_info import package_version
from app.status.status_text import kernel_text
from engine.loading.default_model import models_dir


def _texts(dialog) -> str:
    return "\n".join(label.text() for label in dialog.findChildren(QLabel))


def test_about_shows_version_model_kernels_and_folders(make_window, data_dir, model_path):
    window = make_window()
    about_action = next(a for top in window.menuBar().actions() if top.text() == "&Help"
                        for a in top.menu().actions() if a.text() == "About Tandem")
    about_action.trigger()
    dialog = window.about_dialog
    text = _texts(dialog)
    assert f"Version {package_version('tandem')}" in text
    assert window.bridge.model_name in text and model_path in text
    assert window.bridge.kernel_status                       # the real engine reports them
    assert kernel_text(window.bridge.kernel_status).line in text
    for name in window.bridge.kernel_status:
        assert name in text
    assert str(data_dir) in text and str(data_dir / "traces") in text
    assert str(models_dir()) in text
    assert dialog.info.as_text().startswith(f"Tandem {package_version('tandem')}\nModel: ")


def test_about_without_a_model_and_open_folder(make_window, data_dir, monkeypatch):
    window = make_window(load=False)
    opened = []
    monkeypatch.setattr("app.windows.about_dialog.QDesktopServices.openUrl",
                        lambda url: opened.append(url.toLocalFile()) or True)
    dialog = window.show_about()
    assert "none loaded" in _texts(dialog) and "kernels: no model loaded" in _texts(dialog)
    assert not (data_dir / "traces").exists()
    dialog.open_buttons["Traces folder"].click()             # made on demand, then shown
    assert opened == [str(data_dir / "traces")] and (data_dir / "traces").is_dir()
