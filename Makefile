# gpipe-repro — `make help` lists the targets. Every target sets up .venv itself.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export WANDB_SILENT := true

.DEFAULT_GOAL := help
.PHONY: help setup gpu-check-dry-run demo demo-publish test test-fast test-long test-targets test-network lint format docs bench-engine bench-plan bench-hostmem bench-save table1 gpu-check clean table5 table5-quick fig3 fig3-quick validate-sim validate-hw validate-plan validate-plan-quick table2 table3 schedules

help: ## list the targets
	@grep -E '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

# make setup's switches (README, "GPU cluster, offline"; tools/setup_venv.py):
#   TORCH=pinned (default): requirements-torch.txt's torch (CI; the CPU build on this project's
#     machines); TORCH=given: $(PY)'s own torch and packages, never a second torch (a cluster node, a
#     container); TORCH=auto: given where $(PY) has a torch. Below the supported floor: refused.
#   OFFLINE=1: every package from $(WHEELHOUSE) alone (pip --no-index); OFFLINE=auto: where the torch
#     is given and a wheelhouse is there.
TORCH ?= pinned
OFFLINE ?= 0
WHEELHOUSE ?= .wheelhouse
SETUP_VENV = $(PY) tools/setup_venv.py --venv $(VENV) --wheelhouse $(WHEELHOUSE)
SETUP_INPUTS := pyproject.toml requirements.txt requirements-torch.txt requirements-lint.txt requirements-build.txt

$(STAMP): $(SETUP_INPUTS)
	$(SETUP_VENV) --torch $(TORCH) --offline $(OFFLINE)

setup: ## create .venv and install the project (editable): TORCH=pinned|given|auto, OFFLINE=0|1|auto (README)
	@$(SETUP_VENV) --torch $(TORCH) --offline $(OFFLINE)

# make wheelhouse: every dependency but torch and torchvision, as wheels for a host with no index
# (tools/wheelhouse.py); WHEEL_PY / WHEEL_PLATFORM: the target's (default: $(PY)'s and this host's);
# WHEEL_HOST_BRINGS: packages the target has, left out with what only they need.
WHEEL_PY ?=
WHEEL_PLATFORM ?=
WHEEL_HOST_BRINGS ?=
# The lent GPU host (shared/reference/ENVIRONMENT.md, "The GPU host"): Python 3.12, torch 2.11 (a
# manylinux_2_28 wheel, so glibc >= 2.28), and its own scientific stack.
GPU_WHEEL_PY := 3.12
GPU_WHEEL_PLATFORM := manylinux_2_28_x86_64
GPU_HOST_BRINGS := numpy scipy pandas matplotlib pillow jinja2 tabulate pytest pytest-timeout \
	pytest-xdist sacrebleu sentencepiece psutil pyyaml

.PHONY: wheelhouse wheelhouse-gpu check-offline-setup gpu-check-device
wheelhouse: ## every dependency except torch/torchvision as wheels -> $(WHEELHOUSE)/ (+ lock.txt); WHEEL_PY=3.12 WHEEL_PLATFORM=manylinux_2_28_x86_64
	$(PY) tools/wheelhouse.py --out $(WHEELHOUSE) --python "$(WHEEL_PY)" --platform "$(WHEEL_PLATFORM)" --host-brings "$(WHEEL_HOST_BRINGS)"

wheelhouse-gpu: ## the wheelhouse for the lent GPU host (Python 3.12, manylinux x86-64; its own numpy/scipy/... left out)
	$(MAKE) wheelhouse WHEEL_PY=$(GPU_WHEEL_PY) WHEEL_PLATFORM=$(GPU_WHEEL_PLATFORM) WHEEL_HOST_BRINGS="$(GPU_HOST_BRINGS)"

tree-manifest: ## .tree.json: HEAD and its files' blob names, so a copy sent without .git (the GPU host) records its commit
	python3 tools/tree_manifest.py

check-offline-setup: ## from a fresh clone: make wheelhouse, then make setup TORCH=given OFFLINE=1 over another venv's torch, no network; gpipe-run (~90 s on 2 cores)
	$(PY) tools/check_offline_setup.py

demo: $(STAMP) ## the main job: a small GPipe sweep (K x M) on real digits, with a table (in its sweep folder; reports/ untouched)
	$(BIN)/gpipe-run -m experiment=demo sweep.publish=false

demo-publish: $(STAMP) ## the demo's sweep, published to reports/demo/ (from a clean commit)
	$(BIN)/gpipe-run -m experiment=demo

# Two pytest workers (one test file each at a time, so a file's module fixtures are built once), then
# the tests marked `timed` (tests/conftest.py) in one process with nothing beside them: their
# assertions read wall-clock times, which a second worker's load disturbs. TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
TEST_MARKS := not target and not long
# The second phase collects only the files of tests/conftest.py's TIMED list (collecting all of them
# again costs seconds; tests/test_makefile.py checks that every TIMED entry's file is here).
TIMED_FILES := $(shell sed -n '/^TIMED = (/,/^)/s/^ *"\([^":]*\).*/\1/p' tests/conftest.py | sort -u)
# Both phases run whatever the first gives; the exit status is the worse of the two.
test: $(STAMP) ## the test suite (CPU, real gloo ranks; its budget: 12 min on 2 cores, each part printing its slowest tests; the longest: make test-long, make test-targets)
	@rc=0; \
	$(BIN)/python -m pytest -q --durations=20 -n $(TEST_WORKERS) --dist loadfile -m "$(TEST_MARKS) and not timed" || rc=$$?; \
	$(BIN)/python -m pytest -q --durations=10 -m "$(TEST_MARKS) and timed" $(TIMED_FILES) || rc=$$?; \
	exit $$rc

test-long: $(STAMP) ## the minutes-long end-to-end tests and grid cells left out of make test (~9 min)
	$(BIN)/python -m pytest -q --durations=30 -m long

test-targets: $(STAMP) ## each paper target's quick variant end to end, its report checked (~10 min)
	$(BIN)/python -m pytest -q -m target

test-network: $(STAMP) ## the tests that fetch from the internet (the Debian archive; skipped when it cannot be reached)
	$(BIN)/python -m pytest -q -m network

test-fast: $(STAMP) ## the tests not marked slow (the same two phases as make test; ~3 min)
	@rc=0; \
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "$(TEST_MARKS) and not slow and not timed" || rc=$$?; \
	$(BIN)/python -m pytest -q -m "$(TEST_MARKS) and not slow and timed" $(TIMED_FILES) || rc=$$?; \
	exit $$rc

lint: $(STAMP) ## ruff (check + format) and mypy (strict on the engine)
	$(BIN)/ruff check src tests bench tools
	$(BIN)/ruff format --check src tests bench tools
	$(BIN)/mypy

format: $(STAMP) ## apply ruff's formatting and import order
	$(BIN)/ruff check --fix -q src tests bench tools
	$(BIN)/ruff format src tests bench tools

docs: $(STAMP) ## regenerate docs/ (options, metrics.json contract) from the code
	$(BIN)/python -m gpipe_repro.config.docs --out docs
	$(BIN)/python -m gpipe_repro.metrics.schema --out docs

bench-engine: $(STAMP) ## engine benchmark -> reports/engine/ (ours vs torch pipelining, K=2 speed-up, overhead)
	$(BIN)/python bench/engine.py --out reports/engine

PLAN_BENCH := model=transformer_lm model.L=48 model.d=2048 model.H=8192 model.A=32 data=synthetic \
	data.kind=tokens data.vocab=32000 data.seq_len=1024 hardware=tpu_v3 plan.devices=48 \
	plan.batch_size=960 plan.max_m=128 plan.top=3
bench-plan: $(STAMP) ## gpipe-plan's search speed on one core (Transformer-48, 48 TPU v3, 14,505 candidates): its search line
	@out=$$(mktemp -d) && taskset -c 0 $(BIN)/gpipe-plan $(PLAN_BENCH) plan.out=$$out | tail -1; rm -rf $$out

bench-hostmem: $(STAMP) ## page faults and peak memory, host_memory=system vs retain -> reports/engine/hostmem.md
	$(BIN)/python bench/hostmem.py --out reports/engine

# make gpu-check sets up over $(PY)'s own torch where it has one, from $(WHEELHOUSE) alone where
# that is there: on a GPU host with no index it never asks one.
GPU_CHECK_OUT ?= reports/gpu
GPU_TORCH ?= auto
GPU_OFFLINE ?= auto
gpu-check: ## on a CUDA host: set-up (GPU_TORCH=auto GPU_OFFLINE=auto), gpu tests, measurements -> reports/gpu/ (<= 8 min; no GPU: one line, exit 0; GPUs torch cannot see: exit 1)
	@start=$$(date +%s); $(SETUP_VENV) --torch $(GPU_TORCH) --offline $(GPU_OFFLINE) && \
	$(BIN)/python bench/gpu_check.py --out $(GPU_CHECK_OUT) --setup-s $$(( $$(date +%s) - start ))

gpu-check-dry-run: $(STAMP) ## every gpu-check step on the CPU at tiny sizes -> outputs/gpu-dry-run/ (what CI exercises)
	$(BIN)/python bench/gpu_check.py --dry-run --out outputs/gpu-dry-run

bench-save: $(STAMP) ## save/load time and size of pipelined saves at K=1,2 -> reports/save/
	$(BIN)/python bench/save.py --out reports/save

clean: ## remove run outputs (keeps reports/)
	rm -rf outputs multirun wandb .pytest_cache

table1: $(STAMP) ## Table 1 (largest model that fits, fp32 and bf16; headline ratios; allocator check) -> reports/table1/ (~7 min)
	$(BIN)/python -m gpipe_repro.paper table1 --publish

.PHONY: table4 table4-quick
table4: $(STAMP) ## Table 4 (transfer: fine-tuned vs scratch, 5 seeds; capacity ladder D=8,16,32; K=1 vs K=2) -> reports/table4/ (15 min in a clean clone on 2 AMD EPYC cores at 0854510)
	$(BIN)/python -m gpipe_repro.paper table4 --publish

table4-quick: $(STAMP) ## Table 4 with 2 seeds and short runs -> outputs/table4-quick/ (a few minutes)
	$(BIN)/python -m gpipe_repro.paper table4 --quick

TABLE5_QUICK := table5_run=M1-quick,M2-quick,M4-quick seed=0,1
# SWEEP_ROOT=DIR puts a quick variant's sweeps in DIR/<experiment> (tests/paper/test_quick_targets.py)
AT = $(if $(SWEEP_ROOT),hydra.sweep.dir=$(SWEEP_ROOT)/$(1) logger=none,)
FIG3_QUICK := train.steps=12 train.eval_every=6 train.curve_limit=10 train.eval_limit=10 seed=0,1
# the tricks' smoke test at 4 layers (34 would take minutes per run)
FIG3_TRICKS_QUICK := mt_size=T4-512-4,T4-512-4-notricks train.steps=6 train.eval_every=3 train.curve_limit=10 train.eval_limit=10 seed=0,1

table5: $(STAMP) ## Table 5: BLEU/NLL vs batch (grown through M), token-matched and same-updates, es->en, 5 seeds -> reports/table5/ (57 min in a clean clone on 2 AMD EPYC cores at 5929e43)
	$(BIN)/gpipe-run -m experiment=table5

table5-quick: $(STAMP) ## Table 5 in a few minutes (U = 8 updates, 2 seeds); report beside the sweep in multirun/
	$(BIN)/gpipe-run -m experiment=table5 $(TABLE5_QUICK) $(call AT,table5)

fig3: $(STAMP) ## Fig. 3: many->English BLEU per language: smallest vs deep/wide pair, 5 seeds; tricks at 34 layers -> reports/fig3/, reports/fig3_tricks/ (87 min measured: 61.6 + 23.8 + set-up)
	$(BIN)/gpipe-run -m experiment=fig3
	$(BIN)/gpipe-run -m experiment=fig3_tricks

fig3-quick: $(STAMP) ## Fig. 3 in a few minutes (3 models + the tricks pair, a few updates, 2 seeds); report beside the sweep in multirun/
	$(BIN)/gpipe-run -m experiment=fig3 $(FIG3_QUICK) $(call AT,fig3)
	$(BIN)/gpipe-run -m experiment=fig3_tricks $(FIG3_TRICKS_QUICK) $(call AT,fig3_tricks)

validate-sim: $(STAMP) ## the simulator against the real engine (K=1,2) and emulation (K=4,8) -> reports/sim/ (29 min in a clean clone on 2 AMD EPYC cores at 909b86d)
	$(BIN)/python -m gpipe_repro.paper validate-sim --publish

validate-hw: $(STAMP) ## published hardware profiles against published training throughputs, and this CPU's roofline -> reports/hw/ (~1 min)
	$(BIN)/python -m gpipe_repro.paper validate-hw --publish

validate-plan: $(STAMP) ## the planner's pick against every configuration measured (4 models x 3 caps) -> reports/plan/ (76 min in a clean clone on 2 AMD EPYC cores at 0854510, every schedule searched; needs a quiet machine)
	$(BIN)/python -m gpipe_repro.paper validate-plan --publish

validate-plan-quick: $(STAMP) ## the planner's validation on small scenarios -> outputs/validate-plan/quick/ (a few minutes)
	$(BIN)/python -m gpipe_repro.paper validate-plan --quick $(if $(SWEEP_ROOT),--out $(SWEEP_ROOT)/validate-plan,)

schedules: $(STAMP) ## what the schedules since GPipe buy: gpipe/1f1b/interleaved/zb-h1 on Table 2's models, simulated on tpu_v3 and this CPU, measured at K=2 -> reports/schedules/
	$(BIN)/python -m gpipe_repro.paper schedules --publish

table2: $(STAMP) ## Table 2 (throughput vs K, M; measured on K GPUs, else simulated on TPU v3 and here) -> reports/table2/ (29 min the first time on 2 AMD EPYC cores at 767d7f6, profiling this CPU)
	@# a cell whose batch cannot fit fails its job by design (the table shows it): report regardless
	-$(BIN)/gpipe-run -m experiment=table2_amoebanet
	-$(BIN)/gpipe-run -m experiment=table2_transformer
	$(BIN)/python -m gpipe_repro.paper table2 --publish

table3: $(STAMP) ## Table 3 (M=32, GPUs without NVLink; measured on K GPUs, else simulated on P100 PCIe and here) -> reports/table3/ (20 min the first time on 2 AMD EPYC cores at 5929e43)
	@# a cell whose batch cannot fit fails its job by design (the table shows it): report regardless
	-$(BIN)/gpipe-run -m experiment=table3_amoebanet
	-$(BIN)/gpipe-run -m experiment=table3_transformer
	$(BIN)/python -m gpipe_repro.paper table3 --publish

.PHONY: scorecard reports-status reports
scorecard: $(STAMP) ## reports/README.md: every claim of the paper with its computed verdict, from the committed reports alone
	$(BIN)/python -m gpipe_repro.paper.scorecard

reports-status: $(STAMP) ## each committed report, its commit, and whether code it depends on changed since (stale: regenerate)
	$(BIN)/python -m gpipe_repro.reports.status

# ALL=1: every report, not only the stale ones; UNTIL=HH:MM: start no target after that time;
# ONLY=sim,plan: these reports alone (names as make reports-status prints them)
reports: $(STAMP) ## remake the stale reports one at a time, then the scorecard (hours: the sum of their targets; logs in outputs/remake/)
	$(BIN)/python -m gpipe_repro.reports.remake $(if $(ALL),--all) $(if $(UNTIL),--until $(UNTIL)) $(if $(ONLY),--only $(ONLY))

.PHONY: setup-gpu soak
CUDA ?= cu130
TORCH_INDEX ?= https://download.pytorch.org/whl/$(CUDA)

setup-gpu: ## .venv afresh with a CUDA torch and the matching torchvision from one index (CUDA=cu130; TORCH_INDEX=...)
	rm -rf $(VENV)
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	@# torch and torchvision at requirements-torch.txt's versions, both from the CUDA index (and their deps)
	$(BIN)/pip install -q --index-url $(TORCH_INDEX) -r requirements-torch.txt
	$(BIN)/pip install -q -r requirements.txt -r requirements-lint.txt
	$(BIN)/pip install -q --no-deps -e .
	@$(BIN)/python -c "import sys, torch; sys.exit(0 if torch.version.cuda else 'setup-gpu: error: torch ' + torch.__version__ + ' from $(TORCH_INDEX) is not a CUDA build')"
	echo "torch=pinned offline=0" > $(STAMP)

soak: $(STAMP) ## a >= 20 min run hit by 10 faults (SIGINT, SIGTERM, SIGKILL of a rank, in a save), resumed each time -> reports/soak/ (~45 min; not in CI)
	$(BIN)/python -m gpipe_repro.runner.soak --minutes 20 --faults 10 --out reports/soak
