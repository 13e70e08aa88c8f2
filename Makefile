# Two entry points do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The CPU wheel of torch 2.13.0; a plain `torch` requirement would pull a CUDA build.
TORCH_SPEC ?= torch==2.13.0
export HF_HUB_OFFLINE := 1
export WANDB_MODE := disabled

.PHONY: demo test venv lint bench models clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/pip install --quiet -e ".[test,dev]"
	touch $@

venv: $(BIN)/.installed

demo: venv
	$(BIN)/eagle-probe evaluate trained_models/centralized.pt
	mkdir -p out
	$(BIN)/eagle-probe extract trained_models/centralized.pt --out out/centralized --force

test: venv
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

lint: venv
	$(BIN)/ruff check eagle_probe tests benchmarks
	$(BIN)/ruff format --check eagle_probe tests benchmarks

bench: venv
	$(BIN)/python benchmarks/shipped_models.py

clean:
	rm -rf $(VENV) .pytest_cache
