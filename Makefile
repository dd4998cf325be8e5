# make demo: set up and run the main grid on the built-in data.  make test: set up and run the tests.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
export HF_HUB_OFFLINE := 1
export WANDB_SILENT := true

.PHONY: setup system-deps harbor demo demo-agents test bench report report-demo sweep reliability
setup: $(STAMP)

system-deps:
	bash scripts/system_deps.sh

# Harbor (agent trials in containers) in its own environment: it needs Python >= 3.12.
harbor:
	bash scripts/harbor_env.sh .venv-harbor

# torch first, pinned, by pip: an unpinned resolver would pull a multi-GB CUDA build (and uv does not look in pip's
# find-links, where a machine may keep its CPU wheel). The rest by uv, compiled as pip compiles (where
# PYTHONDONTWRITEBYTECODE is set, as on CI's machine, an uncompiled venv compiles every module in every process: the
# suite took 4 min longer): the same 162 packages in 24 s where pip took 80 (reports/perf/setup.md); by pip where uv
# cannot reach the index (a mirror set in pip.conf, which uv does not read).
$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q torch==2.13.0 uv
	$(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python -e '.[dev]' || $(BIN)/pip install -q -e '.[dev]'
	rm -f $(VENV)/.installed-* && touch $@

demo: setup
	$(BIN)/python launch.py -m encoder=bm25,minilm fields=nd,all

# make demo-agents : the downstream study on the built-in data: a Docker engine and Harbor brought up here, the built-in
# task tree written, BM25 and MiniLM routing none / gold / routed@1 / routed@10 skills under Harbor's oracle agent
demo-agents: setup system-deps harbor
	bash scripts/docker_engine.sh up
	$(BIN)/python -m skillrouter.agents.builtin_tasks --out .cache/builtin-tasks
	$(BIN)/python launch.py -m -cd sweeps -cn downstream_demo progress=false

# The layers' import contracts (pyproject.toml), then the tests. Two workers, a test file per unit, in the order
# tests/conftest.py sets (the SLURM tests, one cluster, first on one worker; then the longest files first).
# Harbor is optional outside CI: without Python >= 3.12 its tests skip (with CI=true they fail). Its environment is
# built beside ours (an install keeps one core busy): a fresh clone's CI run spent 51 s before pytest, 104 with pip.
test:
	bash scripts/harbor_env.sh .venv-harbor > .harbor-env.log 2>&1 & harbor=$$!; \
	$(MAKE) setup system-deps || { wait $$harbor; exit 1; }; \
	wait $$harbor || echo "make test: no Harbor environment (.harbor-env.log says why); the agent-trial tests will skip" >&2
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=0 --durations-min=1.0

bench: setup
	$(BIN)/python benchmarks/load_pool.py
	$(BIN)/python benchmarks/embed_throughput.py
	$(BIN)/python benchmarks/pairs_scaling.py
	$(BIN)/python benchmarks/shard_embedding.py
	$(BIN)/python benchmarks/serving_latency.py --trained-reranker
	$(BIN)/python benchmarks/grid_profile.py
	$(BIN)/python benchmarks/cached_rerun.py
	$(BIN)/python benchmarks/bm25_real_pool.py
	$(BIN)/python benchmarks/grid_orchestration.py
	$(BIN)/python benchmarks/job_exit.py
	$(BIN)/python benchmarks/grid_allocation.py
	$(BIN)/python benchmarks/train_memory.py --batches 8 --profile 8
	$(BIN)/python benchmarks/bf16_parity.py
	$(BIN)/python benchmarks/padding.py
	$(BIN)/python benchmarks/setup_time.py

# make reliability : run the fault-injection suite and write its table to reports/reliability.md
reliability: setup system-deps
	SKILLROUTER_RELIABILITY_REPORT=reports/reliability.md $(BIN)/python -m pytest -q tests/test_faults.py \
		tests/test_slurm.py -k "faults or node_down or memory"

# make sweep NAME=encoder_results : run the grid behind one paper table (see sweeps/)
sweep: setup
	$(BIN)/python launch.py -m -cd sweeps -cn $(NAME)

# make report : regenerate reports/ from every grid under outputs/multirun
report: setup
	$(BIN)/python -m skillrouter.report --significance

# make report-demo : run every sweep on the built-in data (Qwen3 paths on tiny stand-ins; the downstream study when
# Docker and Harbor, brought up here as make demo-agents does), then make report; its wall time goes to
# reports/perf/report_demo.*
report-demo: setup system-deps harbor
	bash scripts/docker_engine.sh up
	$(BIN)/python scripts/demo_reports.py
