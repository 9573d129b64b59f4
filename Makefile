# Lanes: `make run` builds and starts the portal; `make test` runs every check.
# Each tool is installed only when the pinned version is missing, so warm machines go
# straight to the build. Versions and traps: ../shared/TOOLCHAIN.md.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

BINARYEN_VERSION     := 132.0.0
TOOLS_DIR            ?= $(HOME)/.cache/lanes-tools
BINARYEN_BIN         := $(TOOLS_DIR)/binaryen-$(BINARYEN_VERSION)/node_modules/.bin
SCHEMATHESIS_VERSION := 4.32.5
SCHEMATHESIS         := $(TOOLS_DIR)/schemathesis-$(SCHEMATHESIS_VERSION)/bin/st
# The real SMTP server the notification tests start (tests/notify/smtp_sink.py).
AIOSMTPD_VERSION     := 1.4.6
export LANES_TEST_PYTHON := $(TOOLS_DIR)/aiosmtpd-$(AIOSMTPD_VERSION)/bin/python
# Seconds schemathesis may fuzz the API in `make test`.
API_FUZZ_SECONDS     ?= 120
export PATH          := $(BINARYEN_BIN):$(HOME)/.cargo/bin:$(PATH)

LISTEN   ?= 127.0.0.1:3000
DATA_DIR ?= $(CURDIR)/data
GPUS     ?= auto

.PHONY: run build deb deb-test alerts test tools tools-test fmt-check clippy dev-build unit postgres api-fuzz browser bench screenshot clean

run: build
	@echo "Starting Lanes on http://$(LISTEN) (data in $(DATA_DIR), GPUs: $(GPUS)); Ctrl-C stops it."
	./target/release/lanes serve --listen $(LISTEN) --data-dir $(DATA_DIR) --gpus $(GPUS)

# The web assets first (xtask/: the app in wasm, wasm-bindgen, wasm-opt, compressed copies),
# then the server, which embeds them: one self-contained binary.
SITE_DIR := $(CURDIR)/target/site
build: tools
	cargo xtask site
	LANES_SITE_DIR=$(SITE_DIR) cargo build --release -p lanes-server --bin lanes

# The Debian package (target/deb/lanes_VERSION_ARCH.deb); deploy/ holds what goes in it.
deb: build
	cargo xtask deb

# The package in a fresh Debian root: install, serve, upgrade, remove, purge (tests/deb/run.sh).
deb-test: build
	deb=$$(cargo xtask deb | tail -1) && upgrade=$$(cargo xtask deb --version-suffix upgrade | tail -1) \
		&& tests/deb/run.sh "$$deb" "$$upgrade"

# The alert rules: promtool's checks and unit tests, then a real Prometheus scraping two
# simulated nodes, where every dashboard query returns data and every alert fires.
alerts: dev-build
	promtool check rules deploy/prometheus/alerts.yml
	promtool test rules deploy/prometheus/alerts.test.yml
	python3 tests/prometheus/check.py target/debug/lanes $(TEST_POSTGRES)

# Each phase in turn, timed (.ci/phases.sh prints the table docs/benchmarks.md keeps): the
# builds are phases of their own, so a suite's figure is the suite alone.
PHASES := tools tools-test fmt-check dev-build clippy unit postgres alerts api-fuzz build browser deb-test
test:
	@.ci/phases.sh $(PHASES)
	@echo "All checks passed."

tools:
	@rustup target list --installed | grep -qx wasm32-unknown-unknown \
		|| rustup target add wasm32-unknown-unknown
	@test -x $(BINARYEN_BIN)/wasm-opt \
		|| (mkdir -p $(TOOLS_DIR)/binaryen-$(BINARYEN_VERSION) \
			&& npm install --silent --no-audit --no-fund --prefix $(TOOLS_DIR)/binaryen-$(BINARYEN_VERSION) binaryen@$(BINARYEN_VERSION))

# Headless Chromium for the browser test (Debian's; never a downloaded browser).
tools-test:
	@command -v chromium >/dev/null \
		|| (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null)
	@fc-list | grep -qi 'Noto Sans CJK' \
		|| (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-noto-cjk >/dev/null)
	@command -v prometheus >/dev/null && command -v debootstrap >/dev/null \
		|| (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus debootstrap >/dev/null)
	@test -d tests/browser/node_modules/playwright-core -a -d tests/browser/node_modules/axe-core \
		|| npm ci --silent --no-audit --no-fund --prefix tests/browser
	@test -x $(LANES_TEST_PYTHON) \
		|| (python3 -m venv $(TOOLS_DIR)/aiosmtpd-$(AIOSMTPD_VERSION) \
			&& $(TOOLS_DIR)/aiosmtpd-$(AIOSMTPD_VERSION)/bin/pip install -q aiosmtpd==$(AIOSMTPD_VERSION))
	@test -x $(SCHEMATHESIS) \
		|| (python3 -m venv $(TOOLS_DIR)/schemathesis-$(SCHEMATHESIS_VERSION) \
			&& $(TOOLS_DIR)/schemathesis-$(SCHEMATHESIS_VERSION)/bin/pip install -q schemathesis==$(SCHEMATHESIS_VERSION))

# Formatting, and the server's module graph without cycles (docs/architecture.md).
fmt-check:
	cargo fmt --all -- --check
	python3 .ci/modgraph.py server/src --check >/dev/null

clippy:
	cargo clippy --workspace --all-targets -- -D warnings
	cargo clippy -p lanes-app --lib --target wasm32-unknown-unknown --features hydrate -- -D warnings

# The binary the integration tests start, built in the same feature resolution as the tests
# themselves: `-p lanes-server` alone resolves features differently, and every crate that
# depends on a dependency whose features differ would be compiled twice.
dev-build:
	cargo build --workspace --all-targets

unit: dev-build
	cargo test --workspace

# The same integration suite again, every test on a fresh database of the PostgreSQL server at
# $(TEST_POSTGRES) (made and dropped by each test). `--workspace`, as `dev-build` and `unit`:
# `-p lanes-tests` alone resolves features differently and compiled half the dependencies again.
TEST_POSTGRES ?= postgres://postgres@127.0.0.1:5432/postgres
postgres: dev-build
	@psql "$(TEST_POSTGRES)" -tAc 'SELECT 1' >/dev/null \
		|| (echo "make test needs PostgreSQL at $(TEST_POSTGRES) (set TEST_POSTGRES)"; exit 1)
	LANES_TEST_POSTGRES=$(TEST_POSTGRES) cargo test --workspace --test integration

# Schemathesis against the OpenAPI description: no 5xx, no answer outside the schema.
api-fuzz: dev-build
	tests/schemathesis/run.sh target/debug/lanes $(SCHEMATHESIS) $(API_FUZZ_SECONDS)

# Each step of each page's scenario is a named test; files run one at a time (each starts a
# server and a browser, and the machine has two cores).
browser: build
	node --test --test-concurrency=1 --test-reporter=spec tests/browser/*.test.mjs

bench: build
	LANES_SITE_DIR=$(SITE_DIR) cargo build --release -p lanes-bench
	./bench/run.sh

# Refreshes the README screenshot (docs/dashboard.png) from a scripted scenario.
screenshot: build tools-test
	node tests/browser/screenshot.mjs

clean:
	cargo clean
