# dropscan: every target sets up what it needs on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
CASES_DIR ?= $(CURDIR)/.cache/cases
CASES_SRC ?= $(firstword $(wildcard $(CURDIR)/../shared/cases /work/shared/cases))
DEMO_SDISTS := docutils==0.19 docutils==0.20.1 docutils==0.21.2 requests==2.31.0
# AWS SAM CLI in a virtual environment of its own (it pins its own boto3, cfn-lint, translator)
SAM_VENV := .cache/sam
SAM := $(SAM_VENV)/bin/sam
BUILD_DIR := .aws-sam/build
# The AWS CLI (v1, from PyPI) in a virtual environment of its own: awscli pins its botocore, which the
# project's boto3 must not follow. tests/e2e/test_decisions_up.py runs it from there.
AWSCLI_VENV := .cache/awscli
AWSCLI := $(AWSCLI_VENV)/bin/aws
export SAM_CLI_TELEMETRY := 0

.PHONY: install awscli demo test test-intro lint format cases evidence-cases trixie-src browser bench bench-scale bench-db bench-git bench-evidence bench-evidence-kernel bench-linux fuzz clean package package-bench image image-test

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

lint: install $(SAM)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy shared/dropscan functions tests
	$(BIN)/cfn-lint template.yaml
	$(SAM) validate --lint --template-file template.yaml
	$(BIN)/hadolint infra/triage.Dockerfile infra/firmware.Dockerfile

# The packaging test (tests/package) runs on the artefacts `make package` builds: about 25 s to build,
# 20 s to test, so it is part of every test run.
# What it installs first, each once, and why (it says so before it starts): .venv with the dev and
# triage extras (about 1.3 GB: ScanCode Toolkit and its licence index), the AWS SAM CLI in .cache/sam
# (sam validate and sam build), the AWS CLI in .cache/awscli (the README's upload through dropscan up;
# with SAM about 535 MB), and the Lambda artefacts sam build makes in .aws-sam/build. Skipped tests are
# listed at the end with the command that enables each (tests/conftest.py).
PYTEST_ARGS ?=
test: test-intro lint package $(AWSCLI)
	DROPSCAN_CASES_DIR=$(CASES_DIR) DROPSCAN_CASES_SRC=$(CASES_SRC) DROPSCAN_REQUIRE_PACKAGE=1 \
	  DROPSCAN_AWSCLI=$(CURDIR)/$(AWSCLI) DROPSCAN_REQUIRE_AWSCLI=1 $(BIN)/pytest -q $(PYTEST_ARGS)

test-intro:
	@echo "make test: lint, types, template checks and the tests. Installed first where missing:"
	@echo "  .venv            the project with its dev and triage extras (ScanCode): about 1.3 GB"
	@echo "  $(SAM_VENV)       AWS SAM CLI: sam validate --lint, sam build of the Lambda artefacts"
	@echo "  $(AWSCLI_VENV)    AWS CLI: the README's upload to dropscan up (with SAM about 535 MB)"
	@echo "  $(BUILD_DIR)  the Lambda artefacts (sam build), tested as Lambda runs them"
	@echo "  skipped without more data: make cases (BusyBox acceptance data), make browser (Chromium)"

awscli: $(AWSCLI)

$(AWSCLI):
	$(PY) -m venv $(AWSCLI_VENV)
	$(AWSCLI_VENV)/bin/pip install -q --disable-pip-version-check 'awscli>=1.36'

$(SAM):
	$(PY) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/pip install -q --disable-pip-version-check 'aws-sam-cli>=1.170'

# sam build as a new user runs it, without Docker: the layer (with its libarchive) and the zip functions.
# The triage image needs Docker: `make image` (or `sam build` alone) where there is one.
package: $(SAM)
	$(SAM) build --cached --exclude TriageImageFunction --exclude FirmwareImageFunction \
	  --template-file template.yaml --build-dir $(BUILD_DIR)

# Artefact sizes and each handler's cold import from them (docs/deployment.md has the figures)
package-bench: install package
	$(BIN)/python bench/package.py --build-dir $(BUILD_DIR) --runs 5

image: $(SAM)
	$(SAM) build TriageImageFunction --template-file template.yaml --build-dir $(BUILD_DIR)
	$(SAM) build FirmwareImageFunction --template-file template.yaml --build-dir $(BUILD_DIR)

# The triage image's install steps (infra/triage-install.sh) in a fresh virtual environment: ScanCode
# and its licence index, about 5 minutes; .ci/run runs it, where Docker is not needed.
image-test: install
	DROPSCAN_IMAGE_TEST=1 DROPSCAN_CASES_DIR=$(CASES_DIR) $(BIN)/pytest -q tests/image

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The acceptance case: BusyBox 1.35.0 and Debian's patch series (Debian's source archive).
cases:
	@[ -n "$(CASES_SRC)" ] || { echo "no ../shared/cases beside the checkout"; exit 1; }
	bash $(CASES_SRC)/fetch.sh $(CASES_DIR) busybox

# Router images built from Debian bookworm's mipsel binaries with the real tools (issue 35): the Debian
# extractors and image builders, the foreign architecture, then tests/helpers/firmware_images.py caches
# the packages and images in .cache/firmware (the tests that need them skip without it, unless
# DROPSCAN_REQUIRE_FIRMWARE=1).
FIRMWARE_DEBS := squashfs-tools u-boot-tools mtd-utils e2fsprogs cpio util-linux lz4 zstd
.PHONY: firmware-tools firmware-cases
firmware-tools:
	@command -v mksquashfs >/dev/null && command -v dumpimage >/dev/null && command -v ubinize >/dev/null && \
	  command -v fsck.cramfs >/dev/null || { apt-get update -qq && apt-get install -y -qq $(FIRMWARE_DEBS) >/dev/null; }

firmware-cases: install firmware-tools
	@dpkg --print-foreign-architectures | grep -qx mipsel || dpkg --add-architecture mipsel
	@apt-cache show busybox-static:mipsel >/dev/null 2>&1 || apt-get update -qq
	$(BIN)/python tests/helpers/firmware_images.py --cache $(CURDIR)/.cache/firmware
	$(BIN)/python tests/helpers/firmware_sources.py --cache $(CURDIR)/.cache/firmware

# The 64 MB router of the speed clause (issue 35): the router with more packages and drivers, about 1,000
# ELF files, in .cache/firmware/router64 (about 2 minutes and 40 MB more of packages, once per recipe)
.PHONY: firmware-router64
firmware-router64: install firmware-tools
	@dpkg --print-foreign-architectures | grep -qx mipsel || dpkg --add-architecture mipsel
	@apt-cache show busybox-static:mipsel >/dev/null 2>&1 || apt-get update -qq
	$(BIN)/python tests/helpers/firmware_images.py --cache $(CURDIR)/.cache/firmware --router64

# Unpack + inventory of the small router against unsquashfs of its rootfs alone (medians, one run), then
# the whole firmware stage on the 64 MB router against the extraction tools alone (docs/firmware.md)
.PHONY: bench-firmware
bench-firmware: firmware-cases firmware-router64 cases
	$(BIN)/python bench/firmware_unpack.py --cache .cache/firmware --runs 5 --out bench-out/firmware
	PYTHONPATH=shared $(BIN)/python bench/firmware_stage.py --cache .cache/firmware --cases $(CASES_DIR) \
	  --runs 3 --out bench-out/firmware

# What checking the router image adds to the kernel drop's end to end (issue 35: at most 30 s): dropscan
# scan without and with --firmware, alternately, linux 6.1.176 ingested once into a shared data folder
# (4-5 minutes the first time); the kernel case and its download (140 MB) as bench-linux makes them.
.PHONY: bench-firmware-kernel
bench-firmware-kernel: firmware-cases
	bash $(CASES_SRC)/fetch.sh $(CASES_DIR) linux=6.1.176-1
	[ -f .cache/bench/linux/acme-linux-6.1.176-gpl.tar.gz ] || \
	  $(BIN)/python $(CASES_SRC)/build_case.py bench/linux.json --cache $(CASES_DIR) --out .cache/bench/linux >/dev/null
	PYTHONPATH=shared $(BIN)/python bench/firmware_kernel.py --upstream $(CASES_DIR)/linux_6.1.176.orig.tar.xz \
	  --drop .cache/bench/linux/acme-linux-6.1.176-gpl.tar.gz --image .cache/firmware/images/router.bin \
	  --data .cache/bench/firmware-kernel/data --runs 2 --out bench-out/firmware-kernel

# What recording a release's literals adds to the BusyBox release's ingest (medians, with vs without)
.PHONY: bench-ingest-literals
bench-ingest-literals: cases
	PYTHONPATH=shared $(BIN)/python bench/ingest_literals.py --archive $(CASES_DIR)/busybox_1.35.0.orig.tar.bz2 \
	  --runs 3 --out bench-out/ingest-literals

# Debian's Chromium for the screenshot test of the HTML report, and its driver for the review desk's
# Selenium test (skipped without them, unless DROPSCAN_REQUIRE_BROWSER=1); about 70 s to install here.
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  { apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null; }

# Benchmarks (not tests): BusyBox by default; `make bench-linux` for the kernel (downloads 140 MB).
bench: install cases
	@command -v hashdeep >/dev/null || apt-get install -y -qq hashdeep >/dev/null || true
	$(BIN)/pip install -q --disable-pip-version-check -e '.[bench]'
	$(BIN)/python $(CASES_SRC)/build_case.py $(CASES_SRC)/busybox.json --cache $(CASES_DIR) --out .cache/bench/busybox >/dev/null
	$(BIN)/python bench/hash_bench.py --upstream busybox@1.35.0=$(CASES_DIR)/busybox_1.35.0.orig.tar.bz2 \
	  --drop .cache/bench/busybox/acme-busybox-1.35.0-gpl.tar.gz --out bench-out/busybox
	$(BIN)/python bench/triage_bench.py --drop .cache/bench/busybox/acme-busybox-1.35.0-gpl.tar.gz \
	  --expected .cache/bench/busybox/expected.json --out bench-out/busybox
	$(BIN)/python bench/web_bench.py --drop .cache/bench/busybox/acme-busybox-1.35.0-gpl.tar.gz \
	  --upstream busybox@1.35.0=$(CASES_DIR)/busybox_1.35.0.orig.tar.bz2 --sizes 120000 --runs 15 --out bench-out/web
	$(MAKE) bench-scale
	$(MAKE) bench-firmware

# A drop nothing upstream explains (issue 22): every file added, 20,000 to 160,000 of them, copies of one
# file and distinct files; time and peak RSS per stage and per report format (bench-out/scale/).
SCALE_SIZES ?= 20000,40000,80000,160000
bench-scale: install
	$(BIN)/python bench/review_scale.py --sizes $(SCALE_SIZES) --out bench-out/scale
	cd bench && PYTHONPATH=../shared ../$(BIN)/python report_scale.py --sizes $(SCALE_SIZES)

bench-linux: install
	@command -v hashdeep >/dev/null || apt-get install -y -qq hashdeep >/dev/null || true
	$(BIN)/pip install -q --disable-pip-version-check -e '.[bench]'
	bash $(CASES_SRC)/fetch.sh $(CASES_DIR) linux=6.1.176-1
	[ -f .cache/bench/linux/acme-linux-6.1.176-gpl.tar.gz ] || \
	  $(BIN)/python $(CASES_SRC)/build_case.py bench/linux.json --cache $(CASES_DIR) --out .cache/bench/linux >/dev/null
	$(BIN)/python bench/hash_bench.py --upstream linux@6.1.176=$(CASES_DIR)/linux_6.1.176.orig.tar.xz \
	  --drop .cache/bench/linux/acme-linux-6.1.176-gpl.tar.gz --runs 3 --out bench-out/linux

# The upstream database at scale, synthetic (issue 23): finalize at 1, 100 and 1,000 releases, 10,000
# packages sharing a licence, writes per release, fifty ingests at once. About 15 minutes.
bench-db: install
	$(BIN)/python bench/scale.py --out bench-out/db

# ingest-git of a real repository (GIT_REPO, GIT_PACKAGE) against the floor of reading every object once
GIT_REPO ?= /work/.mirror/mirror+busybox/repo
GIT_PACKAGE ?= busybox
bench-git: install
	$(BIN)/python bench/git_ingest.py $(GIT_REPO) --package $(GIT_PACKAGE) --out bench-out/git

# Review evidence on BusyBox's real history (issue 24): mirror/busybox plus upstream's branch in
# rmyorston/busybox-w32 ingested with --history; a 1.37.0 drop with real later commits and vendor edits
# checked against its ground truth, with and without the history. Debian's 1.37.0 tarball when apt has
# trixie's deb-src (else git archive of the tag). Two ingests (this code and the commit before review
# evidence, --before) of 5-25 minutes each on these shared machines, then the scans.
EVIDENCE_CACHE ?= .cache/bench/evidence
BUSYBOX_MIRROR ?= /work/.mirror/mirror+busybox/repo
BUSYBOX_W32 ?= /work/.mirror/rmyorston+busybox-w32/repo
# Debian's busybox 1.37.0-6 (trixie) is also scanned with its patch series applied (issue 36): apt needs
# trixie's deb-src (TRIXIE_SRC, written when absent: needs root); on a bookworm host `busybox/trixie`
# resolves the binary package's version, so the source version is asked by number.
TRIXIE_SRC ?= /etc/apt/sources.list.d/trixie-src.sources
DEBIAN_BUSYBOX ?= 1:1.37.0-6
trixie-src:
	@[ -f $(TRIXIE_SRC) ] || grep -rqs "trixie" /etc/apt/sources.list.d/ || \
	  (printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
	  > $(TRIXIE_SRC) && apt-get update -qq) || echo "could not add trixie's deb-src"

bench-evidence: install trixie-src
	@mkdir -p $(EVIDENCE_CACHE)
	@ls $(EVIDENCE_CACHE)/busybox_1.37.0-*.dsc >/dev/null 2>&1 || \
	  (cd $(EVIDENCE_CACHE) && apt-get source -qq --download-only busybox=$(DEBIAN_BUSYBOX) >/dev/null 2>&1) || \
	  echo "no busybox 1.37.0 source from apt: the drop is built from the tag, no Debian series"
	$(BIN)/python bench/evidence_busybox.py --mirror $(BUSYBOX_MIRROR) --w32 $(BUSYBOX_W32) \
	  --cache $(EVIDENCE_CACHE) --runs 3 --out bench-out/evidence \
	  $$(ls $(EVIDENCE_CACHE)/busybox_1.37.0.orig.tar.* 2>/dev/null | sed 's/^/--tarball /')

# The real-data test of review evidence (issue 36, tests/e2e/test_evidence_debian.py): Debian's busybox
# 1.37.0-6 series applied to 1.37.0, scanned against BusyBox's history ingested with --history (once per
# change of the ingest code, about 200 s; tests/helpers/busybox_debian.py). The history is BusyBox's own
# git history from the GitHub mirrors where this machine has them (BUSYBOX_MIRROR, BUSYBOX_W32), else
# Debian's orig tarballs of 1.35.0 (make cases) and 1.37.0 as one commit per release.
EVIDENCE_CASES ?= $(CURDIR)/.cache/evidence
evidence-cases: install trixie-src
	@mkdir -p $(EVIDENCE_CASES)
	@ls $(EVIDENCE_CASES)/busybox_1.37.0-*.dsc >/dev/null 2>&1 || \
	  (cd $(EVIDENCE_CASES) && apt-get source -qq --download-only busybox=$(DEBIAN_BUSYBOX) >/dev/null)
	@[ -z "$(CASES_SRC)" ] || ls $(CASES_DIR)/busybox_1.35.0.orig.tar.* >/dev/null 2>&1 || $(MAKE) cases
	@cp -n $(CASES_DIR)/busybox_1.35.0.orig.tar.* $(EVIDENCE_CASES)/ 2>/dev/null || true
	PYTHONPATH=$(CURDIR)/shared $(BIN)/python tests/helpers/busybox_debian.py --cache $(EVIDENCE_CASES) \
	  --sources $(EVIDENCE_CASES) --mirror $(BUSYBOX_MIRROR) --w32 $(BUSYBOX_W32)

# Review evidence on the kernel drop (issue 24): the evidence step's A/B, manifest sizes, packs against a
# second read of the tarball (bench-out/evidence-kernel/); builds the kernel case as bench-linux does.
bench-evidence-kernel: install
	bash $(CASES_SRC)/fetch.sh $(CASES_DIR) linux=6.1.176-1
	[ -f .cache/bench/linux/acme-linux-6.1.176-gpl.tar.gz ] || \
	  $(BIN)/python $(CASES_SRC)/build_case.py bench/linux.json --cache $(CASES_DIR) --out .cache/bench/linux >/dev/null
	$(BIN)/python bench/evidence_kernel.py --upstream $(CASES_DIR)/linux_6.1.176.orig.tar.xz \
	  --drop .cache/bench/linux/acme-linux-6.1.176-gpl.tar.gz --runs 2 --out bench-out/evidence-kernel

# Coverage-guided fuzzing of the archive walker for FUZZ_SECONDS (atheris; crashes land in fuzz-out/).
FUZZ_SECONDS ?= 120
fuzz: install
	$(BIN)/pip install -q --disable-pip-version-check -e '.[fuzz]'
	@mkdir -p fuzz-out/corpus
	cd fuzz-out && ../$(BIN)/python ../tests/fuzz/fuzz_walk.py corpus -max_total_time=$(FUZZ_SECONDS) -timeout=20 \
	  -rss_limit_mb=2048

clean:
	rm -rf $(VENV) demo-out bench-out fuzz-out .pytest_cache .mypy_cache .ruff_cache .aws-sam
