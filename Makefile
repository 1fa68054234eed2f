# Two entry points a person needs: `make serve` (install + run the router on its embedded
# emulated default) and `make test` (install + lint + the whole test suite; .ci/run runs it).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install serve demo test lint clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

serve: $(STAMP)
	$(BIN)/specswitch serve

demo: $(STAMP)
	$(BIN)/specswitch demo

lint: $(STAMP)
	$(BIN)/ruff check .

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) build *.egg-info
