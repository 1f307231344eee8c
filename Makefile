# The two set-up commands: `make quickstart` runs the main job, `make test` runs the tests.
# Each creates the virtual environment first if it is missing.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXTRAS ?= torch,tensorflow,jax,plot,test,ray

# MXNet 1.9.1 needs numpy<1.24, so it has its own environment; its workers run there.
MXNET_VENV ?= .venv-mxnet

.PHONY: quickstart test test-times test-fast env mxnet-env horovod-env browser slurm ccache

# The quickstart runs PyTorch alone, so it installs only the harness, PyTorch and plotting;
# `make env` (and `make test`) install the rest.
QUICKSTART_EXTRAS := torch,plot

quickstart: $(VENV)/.quickstart
	$(BIN)/scaling devices
	$(BIN)/scaling sweep configs/quickstart.yaml --out runs/quickstart --resume --plot --html

# Tests run in TEST_WORKERS pytest processes, each taking whole files, so that one file's shared
# set-up (a private Slurm cluster, a sweep that several tests read) is made once. The longest
# files go first (tests/file_times.json, refreshed by `make test-times`), so both end together.
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

test: $(VENV)/.installed $(MXNET_VENV)/.installed horovod-env browser slurm
	$(PYTEST) -v --durations=20

# The whole suite, adding each file's time to tests/file_times.json.
test-times: $(VENV)/.installed $(MXNET_VENV)/.installed horovod-env browser slurm
	$(PYTEST) -q --record-file-times

# The tests not marked slow: a few minutes, without building Horovod.
test-fast: $(VENV)/.installed $(MXNET_VENV)/.installed
	$(PYTEST) -q -m "not slow" --durations=10

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

# $(call install_extras,EXTRAS[,FLAGS]): the venv (made if missing) with the harness and EXTRAS
# under constraints.txt, installed by uv (put into the venv by its own pip first), which fetches
# and unpacks the wheels in parallel: the quickstart's install in about half of pip's time
# (bench/results/install_time.json). --system-certs: uv trusts the machine's certificate store,
# as pip does. The quickstart's install passes --compile-bytecode: uv compiles its modules at
# install, on every core, rather than leave it to the first import, where the sweep's first
# cells would each compile torch on their own (their trees start together). The whole test
# environment leaves it to the first import, which compiles only what the tests import. The
# commands below keep bytecode even where the environment says not to: under
# PYTHONDONTWRITEBYTECODE every worker would compile what it imports again (torch._dynamo
# alone, which a first optimizer step imports: 14.6 s against 6 s).
unexport PYTHONDONTWRITEBYTECODE
define install_extras
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	test -x $(BIN)/uv || $(BIN)/python -m pip install --quiet -c constraints.txt uv
	$(BIN)/uv pip install --quiet --system-certs $(2) --python $(BIN)/python -c constraints.txt \
	  -e '.[$(1)]'
endef

$(VENV)/.installed: setup.cfg pyproject.toml constraints.txt
	$(call install_extras,$(EXTRAS))
	touch $@

$(VENV)/.quickstart: setup.cfg pyproject.toml constraints.txt
	$(call install_extras,$(QUICKSTART_EXTRAS),--compile-bytecode)
	touch $@

# Horovod 0.28.1 (its last release, source only) with the gloo controller and no MPI, built
# once per framework against the interpreter that runs that framework's workers: torch in
# .venv, TensorFlow 2.15.1 in its own .venv-tf215 (Horovod does not build against 2.21), MXNet
# in .venv-mxnet. Built wheels are kept in a per-user cache outside the checkout
# ($XDG_CACHE_HOME/scaling/wheels, as pip keeps its own), one folder per framework version, so
# later runs and other clones install them instead of compiling again (the first build takes about 15 minutes on 2
# cores). The three builds share their work through ccache, where apt-get can install it: one
# compiler cache ($(WHEELS)/../ccache) keyed on paths relative to the checkout, so a source that
# compiles the same way for two frameworks (Horovod's bundled gloo, its common code) compiles
# once. Where a GPU is visible the torch build adds NCCL operations; HOROVOD_CUDA=0 or 1
# overrides that.
HOROVOD_VERSION := 0.28.1
TF_HOROVOD_VENV ?= .venv-tf215
TF_HOROVOD_VERSION := 2.15.1
TORCH_VERSION := $(shell sed -n 's/^torch==//p' constraints.txt)
WHEELS ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/scaling/wheels
HOROVOD_SRC := build/horovod/horovod-$(HOROVOD_VERSION).tar.gz
HOROVOD_CUDA ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1 || echo 0)
HOROVOD_JOBS ?= $(shell nproc)
# GCC 13 no longer pulls these in through other headers, and some of Horovod's sources rely on it.
HOROVOD_CXX_INCLUDES := -include cstdint -include string
HOROVOD_DEPS := cmake wheel setuptools packaging psutil cloudpickle cffi pyyaml
HOROVOD_CCACHE = $(shell command -v ccache)
HOROVOD_CCACHE_ENV := CCACHE_DIR=$(abspath $(WHEELS)/../ccache) CCACHE_BASEDIR=$(CURDIR) \
	CCACHE_NOHASHDIR=true CCACHE_COMPILERCHECK=content
HOROVOD_TORCH_WHEELS := $(WHEELS)/horovod-torch-$(TORCH_VERSION)$(if $(filter 1,$(HOROVOD_CUDA)),-cuda)

horovod-env: $(VENV)/.horovod $(TF_HOROVOD_VENV)/.horovod $(MXNET_VENV)/.horovod

ccache:
	@command -v ccache >/dev/null || apt-get install -y -qq ccache >/dev/null 2>&1 || \
	  (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq ccache >/dev/null 2>&1) || \
	  echo "ccache not installed: the three Horovod builds compile their shared sources each"

$(HOROVOD_SRC):
	mkdir -p $(@D)
	$(PYTHON) -m pip download --quiet --no-deps --no-binary :all: -d $(@D) horovod==$(HOROVOD_VERSION)

$(TF_HOROVOD_VENV)/.installed:
	$(PYTHON) -m venv $(TF_HOROVOD_VENV)
	$(TF_HOROVOD_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(TF_HOROVOD_VENV)/bin/python -m pip install --quiet 'tensorflow-cpu==$(TF_HOROVOD_VERSION)' \
	  'click>=8.1' 'rich>=13' 'pyyaml>=6' 'psutil>=5.9' 'scipy>=1.10' 'nvidia-ml-py>=12'
	touch $@

# $(call horovod_wheel,VENV,FRAMEWORK,WHEEL DIR,C++ STANDARD,PREPARE): build the wheel into
# WHEEL DIR unless one is there, then install it into VENV. PREPARE runs in the shell of the
# build, in the unpacked source folder $$src, before it (it may export variables). CMake is the
# venv's own (pip's); CMake 4 needs a policy floor for the gloo that Horovod bundles.
define horovod_wheel
	$(1)/bin/python -m pip install --quiet $(HOROVOD_DEPS)
	if ! ls $(3)/horovod-*.whl >/dev/null 2>&1; then \
	  src=build/horovod/$(notdir $(3)) && rm -rf $$src && mkdir -p $$src && \
	  tar xzf $(HOROVOD_SRC) -C $$src --strip-components 1 && \
	  printf '#!/bin/sh\nexec $(HOROVOD_CCACHE) g++ "$$@" $(4) $(HOROVOD_CXX_INCLUDES)\n' > $$src/cxx && \
	  chmod +x $$src/cxx && \
	  $(5) && \
	  env $(HOROVOD_CCACHE_ENV) HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 HOROVOD_WITH_$(2)=1 \
	    $(foreach other,$(filter-out $(2),PYTORCH TENSORFLOW MXNET),HOROVOD_WITHOUT_$(other)=1) \
	    CXX=$(CURDIR)/$$src/cxx MAKEFLAGS=-j$(HOROVOD_JOBS) HOROVOD_CMAKE=$(abspath $(1))/bin/cmake \
	    CMAKE_POLICY_VERSION_MINIMUM=3.5 \
	    $(1)/bin/python -m pip wheel --quiet --no-deps --no-build-isolation --no-cache-dir \
	      -w $(3) ./$$src; \
	fi
	$(1)/bin/python -m pip install --quiet --no-deps --force-reinstall $(3)/horovod-*.whl
	touch $(1)/.horovod
endef

# CPU only: torch reports a CUDA toolkit wherever its CUDA_HOME is set, and Horovod's CMake
# then insists on finding one, so the check learns to honour HOROVOD_TORCH_CPU_ONLY.
HOROVOD_TORCH_CPU := sed -i 's/print(True if ((torch.version.cuda is not None)/print(True if ((__import__("os").environ.get("HOROVOD_TORCH_CPU_ONLY") is None) and (torch.version.cuda is not None)/' $$src/cmake/Modules/FindPytorch.cmake && export HOROVOD_TORCH_CPU_ONLY=1
# With NCCL: the NCCL that torch ships (pip's nvidia-nccl), linked as a shared library; its
# folder has only libnccl.so.2, so a libnccl.so link beside the source lets CMake find it.
HOROVOD_TORCH_NCCL := nccl=$$($(BIN)/python -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])') && \
	  mkdir -p $$src/nccl-lib && ln -sf $$nccl/lib/libnccl.so.2 $$src/nccl-lib/libnccl.so && \
	  export HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_NCCL_LINK=SHARED \
	    HOROVOD_NCCL_INCLUDE=$$nccl/include HOROVOD_NCCL_LIB=$(CURDIR)/$$src/nccl-lib

$(VENV)/.horovod: $(VENV)/.installed $(HOROVOD_SRC) | ccache
	$(call horovod_wheel,$(VENV),PYTORCH,$(HOROVOD_TORCH_WHEELS),-std=gnu++20,$(if $(filter 1,$(HOROVOD_CUDA)),$(HOROVOD_TORCH_NCCL),$(HOROVOD_TORCH_CPU)))

$(TF_HOROVOD_VENV)/.horovod: $(TF_HOROVOD_VENV)/.installed $(HOROVOD_SRC) | ccache
	$(call horovod_wheel,$(TF_HOROVOD_VENV),TENSORFLOW,$(WHEELS)/horovod-tensorflow-$(TF_HOROVOD_VERSION),-std=c++17,:)

$(MXNET_VENV)/.horovod: $(MXNET_VENV)/.installed $(HOROVOD_SRC) | ccache
	$(call horovod_wheel,$(MXNET_VENV),MXNET,$(WHEELS)/horovod-mxnet-1.9.1,-std=c++17,:)
