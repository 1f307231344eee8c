# The two set-up commands: `make quickstart` runs the main job, `make test` runs the tests.
# Each creates the virtual environment first if it is missing.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXTRAS ?= torch,tensorflow,plot,test

# MXNet 1.9.1 needs numpy<1.24, so it has its own environment; its workers run there.
MXNET_VENV ?= .venv-mxnet

.PHONY: quickstart test env mxnet-env browser slurm

quickstart: $(VENV)/.installed $(MXNET_VENV)/.installed
	$(BIN)/scaling devices
	$(BIN)/scaling sweep configs/quickstart.yaml --out runs/quickstart --resume
	$(BIN)/scaling report runs/quickstart --plot --html

test: $(VENV)/.installed $(MXNET_VENV)/.installed browser slurm
	$(BIN)/python -m pytest -v

# Slurm and munge for the tests' private cluster, where apt-get can install them (as root on
# Debian or Ubuntu); without them the Slurm tests skip and say why.
slurm:
	@command -v slurmctld >/dev/null || apt-get install -y -qq slurm-wlm munge >/dev/null 2>&1 || \
	  (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq slurm-wlm munge >/dev/null 2>&1) || \
	  echo "slurm-wlm not installed: the Slurm tests will skip"

# Headless Chromium for the report's browser test, where apt-get can install it; without it
# that test skips and says why.
browser:
	@command -v chromium >/dev/null || apt-get install -y -qq chromium >/dev/null 2>&1 || \
	  (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq chromium >/dev/null 2>&1) || \
	  echo "chromium not installed: the browser test will skip"

env: $(VENV)/.installed

mxnet-env: $(MXNET_VENV)/.installed

$(MXNET_VENV)/.installed:
	$(PYTHON) -m venv $(MXNET_VENV)
	$(MXNET_VENV)/bin/python -m pip install --quiet 'mxnet==1.9.1' 'numpy<1.24'
	touch $@

$(VENV)/.installed: setup.cfg pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip setuptools wheel
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[$(EXTRAS)]'
	touch $@
