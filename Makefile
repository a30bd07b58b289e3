# make demo: set up .venv (if needed) and run the demo.  make test: set up and run lit + pytest.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
BIN := $(abspath $(VENV))/bin

.PHONY: demo test lit pytest

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py

test: lit pytest

lit: $(STAMP)
	PATH=$(BIN):$$PATH $(BIN)/lit -q test

pytest: $(STAMP)
	PATH=$(BIN):$$PATH $(PY) -m pytest -q test/python
