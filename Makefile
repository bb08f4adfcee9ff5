# Set-up is part of every target: a fresh machine needs nothing but python3 and make.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install label-studio llama-cpp demo test bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q torch==2.13.0   # the CPU wheel; the project itself asks for torch>=2.4
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $@

demo: install label-studio
	$(VENV)/bin/builder demo --auto-review

label-studio: install
	$(PY) -c "from annotation.server import migrated_template; migrated_template()"

# llama.cpp's OpenAI-compatible server and SmolLM2-135M, for the real-server integration test: compiled
# once per machine (12-20 minutes on a fresh one), so that no test waits for it.
llama-cpp: install
	$(PY) -c "from builder.llm.llamacpp import ensure_installed, ensure_model; ensure_installed(); ensure_model()"

test: install label-studio llama-cpp
	$(PY) -m pytest -q

bench: install
	@for f in bench/*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

clean:
	rm -rf $(VENV) demo-workspace .pytest_cache
