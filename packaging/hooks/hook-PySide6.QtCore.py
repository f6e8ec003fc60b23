# Overrides PyInstaller's hook (user hooks take precedence): only the Qt plugins Tandem uses.
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _qt_hook import qt6_dependencies

hiddenimports, binaries, datas = qt6_dependencies(__file__)
