# gpipe-repro — `make help` lists the targets. Every target sets up .venv itself.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export WANDB_SILENT := true

.DEFAULT_GOAL := help
.PHONY: help setup demo test test-fast lint bench-engine bench-hostmem table1 gpu-check clean

help: ## list the targets
	@grep -E '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

$(STAMP): requirements.txt pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $(STAMP)

setup: $(STAMP) ## create .venv with the pinned CPU torch and the project (editable)

demo: $(STAMP) ## the main job: a small GPipe sweep (K x M) on real digits, with a table
	$(BIN)/gpipe-run -m experiment=demo

test: $(STAMP) ## the whole test suite (CPU, real gloo ranks)
	$(BIN)/python -m pytest -q

test-fast: $(STAMP) ## the tests not marked slow
	$(BIN)/python -m pytest -q -m "not slow"

lint: $(STAMP) ## ruff
	$(BIN)/ruff check src tests bench

bench-engine: $(STAMP) ## engine benchmark -> reports/engine/ (ours vs torch pipelining, K=2 speed-up, overhead)
	$(BIN)/python bench/engine.py --out reports/engine

bench-hostmem: $(STAMP) ## page faults and peak memory, host_memory=system vs retain -> reports/engine/hostmem.md
	$(BIN)/python bench/hostmem.py --out reports/engine

clean: ## remove run outputs (keeps reports/)
	rm -rf outputs multirun wandb .pytest_cache

table1: $(STAMP) ## Table 1 (largest model that fits, fp32 and bf16) -> reports/table1/ (memory model, nothing allocated)
	$(BIN)/python -m gpipe_repro.planner.report --out reports/table1

gpu-check: $(STAMP) ## on a CUDA host: gpu tests + engine benchmark -> reports/gpu/ (no CUDA: one line, exit 0)
	$(BIN)/python bench/gpu_check.py --out reports/gpu
