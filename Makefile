# Each target creates .venv and installs what it needs on first use, so a fresh clone needs nothing else.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
RUN_STAMP := $(VENV)/.installed-run
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: demo test lint bench clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(RUN_STAMP): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e ".[infra,train]"
	touch $@

$(DEV_STAMP): pyproject.toml $(RUN_STAMP)
	$(PY) -m pip install --quiet -e ".[infra,train,policy,dev]"
	touch $@

demo: $(RUN_STAMP)
	$(PY) -m workloads run-local --stack dev-zimdb

test: $(DEV_STAMP)
	$(PY) -m pytest

lint: $(DEV_STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy infra workloads trainer policy
	$(PY) -m policy.scan

bench: $(RUN_STAMP)
	$(PY) -m trainer.bench

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache

# Build the training images and push them to a platform stack's ECR repositories (README "images").
.PHONY: images
images:
	scripts/build-images.sh --stack $(STACK)

# Deploy through the policy pack: `make preview STACK=dev`, `make up STACK=prod`. The pack (policy/,
# PulumiPolicy.yaml) runs in .venv; a mandatory violation stops the update before any change. ARGS passes
# more flags to pulumi (e.g. ARGS=--yes, ARGS=--diff).
.PHONY: preview up
preview up: $(DEV_STAMP)
	@test -n "$(STACK)" || { echo "usage: make $@ STACK=<stack> [ARGS=...]" >&2; exit 2; }
	pulumi $@ --stack $(STACK) --policy-pack policy $(ARGS)
