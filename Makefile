# Two commands matter: `make demo` and `make test`. Both install everything they need first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

# `sam build` runs in the suite; it needs the functions' Python (python3.12) and SAM CLI, in a venv of their own
# (SAM CLI pins its own boto3, cfn-lint and translator)
PYTHON312 ?= $(shell for p in $$(command -v python3.12) $$HOME/.pyenv/versions/3.12*/bin/python3.12; do \
	$$p -c '' 2>/dev/null && { echo $$p; break; }; done)
SAM_VENV  := .venv-sam
SAM_CLI_VERSION := 1.170.0
# checkov (security scan of the templates) pins dependencies that clash with ours: a venv of its own
CHECKOV_VENV := .venv-checkov
CHECKOV_VERSION := 3.3.30
TEMPLATES := template.yaml template-monitoring.yaml

# The installs are independent of each other (three venvs, Maven, apt): side by side. Output is not synced, so the
# suite's progress shows as it runs.
MAKEFLAGS += --jobs=4

.PHONY: install kafka chromium lambda-runtime demo test test-quick lint bench clean docs docs-serve docs-images

install: $(STAMP) kafka $(SAM_VENV)/bin/sam chromium lambda-runtime

# Apache Kafka for the local clusters (tests, demo, bench), the pinned version and the compatibility tier's, from
# Maven Central with infra/kafka/pom.xml; once (a no-op when installed); needs Java 17+ and Maven.
kafka: $(STAMP)
	@$(BIN)/python -m srm.local.kafka install
	@$(BIN)/python -m srm.local.clusters archive  # a broker's classes, mapped by every start: a quicker, cheaper one
	@$(BIN)/python -m srm.local.aggregator archive  # the Spark driver's classes, likewise (the metrics aggregation)

$(SAM_VENV)/bin/sam:
	@test -n "$(PYTHON312)" || { echo "make: python3.12 is needed for sam build (the functions' runtime); install it or set PYTHON312=/path/to/python3.12"; exit 2; }
	$(PYTHON312) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/pip install --quiet aws-sam-cli==$(SAM_CLI_VERSION)

# The Lambda runtime the suite runs the `sam build` output in (tests/lambda): the Runtime Interface Emulator built
# with Go from the module proxy (which serves its pseudo-versions only), and a venv of the functions' Python with only
# what Lambda's python3.12 runtime brings (awslambdaric, boto3), so a module the layer misses fails there as on AWS.
LAMBDA_VENV := .venv-lambda
RIE_VERSION := v0.0.0-20261030222936-bef5c4ba774d
AWSLAMBDARIC_VERSION := 4.2.2
LAMBDA_BOTO3_VERSION := 1.44.8
lambda-runtime: $(LAMBDA_VENV)/bin/aws-lambda-rie $(LAMBDA_VENV)/.installed

$(LAMBDA_VENV)/bin/aws-lambda-rie:
	@mkdir -p $(LAMBDA_VENV)/bin
	GOBIN=$(abspath $(LAMBDA_VENV)/bin) GOFLAGS=-buildvcs=false CGO_ENABLED=0 \
	  go install github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@$(RIE_VERSION)

$(LAMBDA_VENV)/.installed: Makefile
	@test -n "$(PYTHON312)" || { echo "make: python3.12 is needed for the Lambda runtime's venv; set PYTHON312=/path/to/python3.12"; exit 2; }
	$(PYTHON312) -m venv $(LAMBDA_VENV)
	$(LAMBDA_VENV)/bin/pip install --quiet awslambdaric==$(AWSLAMBDARIC_VERSION) boto3==$(LAMBDA_BOTO3_VERSION)
	touch $@

$(CHECKOV_VENV)/bin/checkov:
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install --quiet checkov==$(CHECKOV_VERSION)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

# Debian's chromium and its driver, for the web view's browser test (tests/browser); where they cannot be installed,
# say why: that test then skips and prints the reason.
chromium:
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then :; \
	elif ! command -v apt-get >/dev/null; then echo "make: no apt-get here: chromium not installed, the browser test will skip"; \
	elif [ "$$(id -u)" != 0 ]; then echo "make: not root: chromium not installed, the browser test will skip"; \
	else echo "make: installing Debian's chromium and chromium-driver (browser test)"; export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null 2>&1 || \
	  { apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null; } || \
	  echo "make: apt-get could not install chromium: the browser test will skip"; \
	fi

demo: install
	$(BIN)/srm demo

# The suite on the pinned Apache Kafka, then its core end-to-end tests (marker compat) on the compatibility tier's
COMPAT_KAFKA = $(shell $(BIN)/python -c 'from srm.local.kafka import COMPATIBILITY_VERSIONS as v; print(v[0])' 2>/dev/null)
# Four workers (pytest-xdist) on 2 cores, each with Kafka clusters of its own: most tests wait on brokers and
# processes, and the suite's brokers start on little CPU (tests/conftest.py). Then the compatibility tier, in a
# session of its own, and srm.aws's tests as LocalStack answers them (about 25 s, a minute more the first time).
PYTEST_WORKERS ?= 4
test: install lint
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup --durations=15  # the slowest: the 20-minute budget
	SRM_KAFKA_VERSION=$(COMPAT_KAFKA) $(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup -m compat
	$(LOCALSTACK_TESTS) -q

# The inner loop while changing code: the unit and integration tiers (real brokers, no CLI subprocesses, Spark or
# browser), about two minutes; `make test` stays what CI runs.
test-quick: $(STAMP) kafka
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup tests/unit tests/integration

lint: install $(CHECKOV_VENV)/bin/checkov
	$(BIN)/ruff check layers tests functions bench glue_jobs docs/tooling
	$(BIN)/ruff format --check layers tests functions bench glue_jobs docs/tooling
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/cfn-lint --regions us-east-1 us-west-2 -- $(TEMPLATES)
	for t in $(TEMPLATES); do SAM_CLI_TELEMETRY=0 $(SAM_VENV)/bin/sam validate --lint --region us-east-1 -t $$t || exit 1; done
	# zero failed checks; a check that does not apply is skipped in the resource's Metadata, with its reason
	$(CHECKOV_VENV)/bin/checkov --quiet --compact --skip-download --framework cloudformation $(addprefix -f ,$(TEMPLATES))
	$(MAKE) --no-print-directory docs

# The documentation site (mkdocs.yml): pages under docs/, the references generated from the code at build time
# (docs/tooling); --strict fails on a broken link or anchor, or a page outside the nav. Into site/ (not committed).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --strict

# The pictures the docs carry, made by the code rather than drawn: the web view as the browser test sees it (its
# screenshot, in the temp folder) and the demo's chart (make demo writes srm-demo.png). Commit what it copies.
docs-images: $(STAMP) chromium
	$(BIN)/python -m pytest -q tests/browser/test_web_view.py -k flows_topics_and_charts
	cp "$$($(BIN)/python -c 'import tempfile; print(tempfile.gettempdir())')/srm-web-view.png" docs/images/web-view.png
	@if [ -f srm-demo.png ]; then cp srm-demo.png docs/images/srm-demo.png; else echo "make: no srm-demo.png: run make demo first"; fi

# srm.aws's tests (marker aws_adapter) on LocalStack instead of moto, in host mode; its own venv, .venv-localstack
# (Python 3.12+), installed on first use; `make test` runs them too
LOCALSTACK_TESTS = $(BIN)/python -m tests.support.localstack -m aws_adapter
.PHONY: test-localstack
test-localstack: install
	$(LOCALSTACK_TESTS)

bench: install
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) $(SAM_VENV) $(CHECKOV_VENV) $(LAMBDA_VENV) .venv-localstack .pytest_cache .ruff_cache .mypy_cache build site *.egg-info
