# The two set-up commands of the README: `make demo` and `make test` (CI runs `make test`).
# Everything goes into ./.venv from pinned versions (constraints.txt); nothing else is assumed.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test install lint bench

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade "pip==25.3"

install: $(BIN)/python
	$(BIN)/pip install --quiet -c constraints.txt -e ".[examples,test,remote]"

# Installs the project and runs the quickstart on the IPU Model.
demo: install
	$(BIN)/python ipu/examples/quickstart.py

lint: install
	$(BIN)/ruff check .

# Installs the project and its test tools (Debian's chromium for the HTML report test), then
# lints and runs the test suite.
test: install
	sh tools/install_test_deps.sh
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

bench: install
	$(BIN)/python bench/dispatch.py
