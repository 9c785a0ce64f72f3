# dropscan: every target sets up what it needs on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
CASES_DIR ?= $(CURDIR)/.cache/cases
CASES_SRC ?= $(firstword $(wildcard $(CURDIR)/../shared/cases /work/shared/cases))
DEMO_SDISTS := docutils==0.19 docutils==0.20.1 docutils==0.21.2 requests==2.31.0

.PHONY: install demo test lint format cases browser bench bench-linux bench-scale bench-git fuzz clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[dev,triage]'
	touch $(STAMP)

# Real upstream data: released sdists from PyPI (fetched once into .cache/demo).
demo: install
	@mkdir -p .cache/demo
	@for s in $(DEMO_SDISTS); do \
	  f=.cache/demo/$$(echo $$s | sed 's/==/-/').tar.gz; \
	  [ -f $$f ] || $(BIN)/pip download -q --disable-pip-version-check --no-deps --no-binary :all: -d .cache/demo $$s; \
	done
	$(BIN)/dropscan demo --cache .cache/demo --out demo-out

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy shared/dropscan functions tests
	$(BIN)/cfn-lint template.yaml

test: lint
	DROPSCAN_CASES_DIR=$(CASES_DIR) DROPSCAN_CASES_SRC=$(CASES_SRC) $(BIN)/pytest -q

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The acceptance case: BusyBox 1.35.0 and Debian's patch series (Debian's source archive).
cases:
	@[ -n "$(CASES_SRC)" ] || { echo "no ../shared/cases beside the checkout"; exit 1; }
	bash $(CASES_SRC)/fetch.sh $(CASES_DIR) busybox

# Debian's Chromium for the screenshot test of the HTML report (skipped without it, unless
# DROPSCAN_REQUIRE_BROWSER=1); about 70 s to install on these machines.
browser:
	@command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }

# Benchmarks (not tests): BusyBox by default; `make bench-linux` for the kernel (downloads 140 MB).
bench: install cases
	@command -v hashdeep >/dev/null || apt-get install -y -qq hashdeep >/dev/null || true
	$(BIN)/pip install -q --disable-pip-version-check -e '.[bench]'
	$(BIN)/python $(CASES_SRC)/build_case.py $(CASES_SRC)/busybox.json --cache $(CASES_DIR) --out .cache/bench/busybox >/dev/null
	$(BIN)/python -m dropscan.bench --upstream busybox@1.35.0=$(CASES_DIR)/busybox_1.35.0.orig.tar.bz2 \
	  --drop .cache/bench/busybox/acme-busybox-1.35.0-gpl.tar.gz --out bench-out/busybox
	$(BIN)/python -m dropscan.bench_triage --drop .cache/bench/busybox/acme-busybox-1.35.0-gpl.tar.gz \
	  --expected .cache/bench/busybox/expected.json --out bench-out/busybox

bench-linux: install
	@command -v hashdeep >/dev/null || apt-get install -y -qq hashdeep >/dev/null || true
	$(BIN)/pip install -q --disable-pip-version-check -e '.[bench]'
	bash $(CASES_SRC)/fetch.sh $(CASES_DIR) linux
	[ -f .cache/bench/linux/acme-linux-6.1.176-gpl.tar.gz ] || \
	  $(BIN)/python $(CASES_SRC)/build_case.py bench/linux.json --cache $(CASES_DIR) --out .cache/bench/linux >/dev/null
	$(BIN)/python -m dropscan.bench --upstream linux@6.1.176=$(CASES_DIR)/linux_6.1.176.orig.tar.xz \
	  --drop .cache/bench/linux/acme-linux-6.1.176-gpl.tar.gz --runs 3 --out bench-out/linux

# The upstream database at scale, synthetic (issue 23): finalize at 1, 100 and 1,000 releases, 10,000
# packages sharing a licence, writes per release, fifty ingests at once. About 15 minutes.
bench-scale: install
	$(BIN)/python bench/scale.py --out bench-out/scale

# ingest-git of a real repository (GIT_REPO, GIT_PACKAGE) against the floor of reading every object once
GIT_REPO ?= /work/.mirror/mirror+busybox/repo
GIT_PACKAGE ?= busybox
bench-git: install
	$(BIN)/python bench/git_ingest.py $(GIT_REPO) --package $(GIT_PACKAGE) --out bench-out/git

# Coverage-guided fuzzing of the archive walker for FUZZ_SECONDS (atheris; crashes land in fuzz-out/).
FUZZ_SECONDS ?= 120
fuzz: install
	$(BIN)/pip install -q --disable-pip-version-check -e '.[fuzz]'
	@mkdir -p fuzz-out/corpus
	cd fuzz-out && ../$(BIN)/python ../tests/fuzz/fuzz_walk.py corpus -max_total_time=$(FUZZ_SECONDS) -timeout=20 \
	  -rss_limit_mb=2048

clean:
	rm -rf $(VENV) demo-out bench-out fuzz-out .pytest_cache .mypy_cache .ruff_cache
