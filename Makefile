# The two set-up commands: `make quickstart` runs the main job, `make test` runs the tests.
# Each creates the virtual environment first if it is missing.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXTRAS ?= torch,tensorflow,plot,test

.PHONY: quickstart test env

quickstart: $(VENV)/.installed
	$(BIN)/scaling devices
	$(BIN)/scaling sweep configs/quickstart.yaml --out runs/quickstart --resume

test: $(VENV)/.installed
	$(BIN)/python -m pytest -v

env: $(VENV)/.installed

$(VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip setuptools wheel
	$(BIN)/python -m pip install --quiet -e '.[$(EXTRAS)]'
	touch $@
