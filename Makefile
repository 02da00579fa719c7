# Each target creates .venv and installs what it needs on first use, so a fresh clone needs nothing else.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
RUN_STAMP := $(VENV)/.installed-run
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: demo dev test lint bench clean

# On Linux the default torch wheel bundles the CUDA libraries (several GB). For a CPU-only install:
#   make demo TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# pip then also looks there and takes its `+cpu` build of the pinned torch (a local version satisfies
# torch==X.Y.Z and sorts above it); every other package still comes from PyPI.
TORCH_INDEX_URL ?=
# constraints.txt pins every package, transitive ones included (scripts/lock_requirements.py dev writes it),
# so the same commit installs the same versions on any machine in any month; --build-constraint pins what
# pip builds this project with too.
LOCK := constraints.txt
PIP_INSTALL := $(PY) -m pip install --progress-bar on --constraint $(LOCK) --build-constraint $(LOCK) \
	$(if $(TORCH_INDEX_URL),--extra-index-url $(TORCH_INDEX_URL))

$(VENV)/bin/python:
	@echo "==> creating $(VENV) with $(PYTHON)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --constraint $(LOCK) pip setuptools

# What `make demo` and `make bench` run: the trainer (torch and its data/metrics packages) and the
# `workloads run-local` CLI, which imports no Pulumi SDK. --no-compile: Python compiles the modules a run
# imports when it imports them, instead of pip compiling all of torch's thousands up front.
$(RUN_STAMP): pyproject.toml $(LOCK) | $(VENV)/bin/python
	@echo "==> installing the trainer's packages (torch is the big one)"
	$(PIP_INSTALL) --no-compile -e ".[train]"
	touch $@

# Everything a developer uses: the Pulumi SDKs, the policy pack, the test tools, Hugging Face data sets and
# the LLM fine-tuning libraries (transformers, peft).
# Then the bytecode the run install left out: the tests start a hundred Python processes that import torch,
# and without .pyc files (or where PYTHONDONTWRITEBYTECODE keeps Python from writing them) each one would
# compile torch's and sympy's sources again, seconds of CPU a process. Like pip, files that do not compile
# on this Python (torch ships one for 3.12+ only) are left as they are.
$(DEV_STAMP): pyproject.toml $(LOCK) $(RUN_STAMP)
	@echo "==> installing the Pulumi SDKs, the policy pack and the test tools"
	$(PIP_INSTALL) -e ".[infra,train,policy,dev,hf,ray,llm,mlflow]"
	@echo "==> compiling the installed packages' bytecode"
	$(PY) -c 'import compileall, sysconfig; compileall.compile_dir(sysconfig.get_paths()["purelib"], quiet=2, workers=0)'
	touch $@

demo: $(RUN_STAMP)
	$(PY) -m workloads run-local --stack dev-zimdb

# Installs everything `make test`, `make lint`, `python -m infra` and `python -m workloads` use; runs nothing.
dev: $(DEV_STAMP)

# One pytest worker per core (pytest-xdist): the tests are safe to run in parallel (ports the OS picks,
# their own temporary directories); the fault figures are gathered from every worker. `loadfile` keeps each
# test file on one worker, so a module's costly fixture (the rehearsal, the checkov scan) is computed once.
test: $(DEV_STAMP)
	$(PY) -m compileall -q infra workloads trainer policy sim
	$(PY) -m pytest -n auto --dist loadfile

lint: $(DEV_STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy infra workloads trainer policy
	$(PY) -m policy.scan

bench: $(RUN_STAMP)
	$(PY) -m trainer.bench

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache

# Build the training images and push them to a platform stack's ECR repositories (docs/images.md).
.PHONY: images
images:
	scripts/build-images.sh --stack $(STACK)

# Deploy through the policy pack: `make preview STACK=dev`, `make up STACK=prod`. The pack (policy/,
# PulumiPolicy.yaml) runs in .venv; a mandatory violation stops the update before any change. ARGS passes
# more flags to pulumi (e.g. ARGS=--yes, ARGS=--diff).
.PHONY: preview up
preview up:
	@test -n "$(STACK)" || { echo "usage: make $@ STACK=<stack> [ARGS=...]" >&2; exit 2; }
	@$(MAKE) --no-print-directory $(DEV_STAMP)  # after the usage check: a usage error installs nothing
	pulumi $@ --stack $(STACK) --policy-pack policy $(ARGS)
