# make demo: set up and run the main grid on the built-in data.  make test: set up and run the tests.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
export HF_HUB_OFFLINE := 1
export WANDB_SILENT := true

.PHONY: setup demo test bench report
setup: $(STAMP)

# torch first, pinned: an unpinned resolver would pull a multi-GB CUDA build.
$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	rm -f $(VENV)/.installed-* && touch $@

demo: setup
	$(BIN)/python launch.py -m encoder=bm25,minilm fields=nd,all

test: setup
	$(BIN)/python -m pytest -q

bench: setup
	$(BIN)/python benchmarks/embed_throughput.py
	$(BIN)/python benchmarks/bm25_real_pool.py
