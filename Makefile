# gpipe-repro — `make help` lists the targets. Every target sets up .venv itself.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export WANDB_SILENT := true

.DEFAULT_GOAL := help
.PHONY: help setup demo test test-fast lint bench-engine bench-hostmem table1 clean validate-sim table2 table3

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

table1: $(STAMP) ## Table 1 (largest model that fits) -> reports/table1/ (memory model on the meta device)
	$(BIN)/python -m gpipe_repro.planner.report --out reports/table1

validate-sim: $(STAMP) ## the simulator against the real engine (K=1,2) and emulation (K=4,8) -> reports/sim/ (~20 min)
	$(BIN)/python -m gpipe_repro.sim.validation --out reports/sim

table2: $(STAMP) ## Table 2 (throughput vs K, M; measured on K GPUs, else simulated on TPU v3 and here) -> reports/table2/
	$(BIN)/gpipe-run -m experiment=table2_amoebanet
	$(BIN)/gpipe-run -m experiment=table2_transformer
	$(BIN)/python -m gpipe_repro.report.paper_tables --table 2

table3: $(STAMP) ## Table 3 (M=32, GPUs without NVLink; measured on K GPUs, else simulated on P100 PCIe and here) -> reports/table3/
	$(BIN)/gpipe-run -m experiment=table3_amoebanet
	$(BIN)/gpipe-run -m experiment=table3_transformer
	$(BIN)/python -m gpipe_repro.report.paper_tables --table 3
