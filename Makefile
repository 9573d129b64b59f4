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
# The Jupyter a test member installs in their own login environment (tests/tests/notebook.rs):
# wheels downloaded once, for the system's Python (the member's), installed without the network.
JUPYTER_SERVER_VERSION := 2.21.1
IPYKERNEL_VERSION    := 7.4.0
export LANES_TEST_JUPYTER_WHEELS := $(TOOLS_DIR)/jupyter-wheels-$(JUPYTER_SERVER_VERSION)
# Seconds schemathesis may fuzz the API in `make test`.
API_FUZZ_SECONDS     ?= 120
export PATH          := $(BINARYEN_BIN):$(HOME)/.cargo/bin:$(PATH)

LISTEN   ?= 127.0.0.1:3000
DATA_DIR ?= $(CURDIR)/data
GPUS     ?= auto

.PHONY: run build site deb deb-test alerts test tools tools-test fmt-check clippy dev-build unit postgres api-fuzz browser bench screenshot tour clean

run: build
	@echo "Starting Lanes on http://$(LISTEN) (data in $(DATA_DIR), GPUs: $(GPUS)); Ctrl-C stops it."
	./target/release/lanes serve --listen $(LISTEN) --data-dir $(DATA_DIR) --gpus $(GPUS)

# The web assets first (xtask/: the app in wasm, wasm-bindgen, wasm-opt, compressed copies),
# then the server, which embeds them: one self-contained binary.
SITE_DIR := $(CURDIR)/target/site
build: site
	LANES_SITE_DIR=$(SITE_DIR) cargo build --release -p lanes --bin lanes

site: tools
	cargo xtask site

# The Debian package (target/deb/lanes_VERSION_ARCH.deb); deploy/ holds what goes in it.
deb: build
	cargo xtask deb

# The package in a fresh Debian root: install, serve, upgrade, remove, purge (tests/deb/run.sh).
# In `make test` it packages the dev build, which carries the web assets there (TEST_BUILD).
TEST_BIN := $(CURDIR)/target/debug/lanes
deb-test: dev-build
	deb=$$(cargo xtask deb --binary $(TEST_BIN) | tail -1) \
		&& upgrade=$$(cargo xtask deb --binary $(TEST_BIN) --version-suffix upgrade | tail -1) \
		&& tests/deb/run.sh "$$deb" "$$upgrade"

# The alert rules: promtool's checks and unit tests, then a real Prometheus scraping two
# simulated nodes, where every dashboard query returns data and every alert fires.
alerts: dev-build
	promtool check rules deploy/prometheus/alerts.yml
	promtool test rules deploy/prometheus/alerts.test.yml
	python3 tests/prometheus/check.py target/debug/lanes $(TEST_POSTGRES)

# Each phase in turn, timed (.ci/phases.sh prints the table docs/benchmarks.md keeps): the
# builds are phases of their own, so a suite's figure is the suite alone; `a+b` runs two side
# by side (suites that wait more than they compute, and the test tools' downloads beside the
# web assets' build on a machine that lacks them). Each profile is compiled once
# (TEST_BUILD=1 below): the web assets first, then the dev build with them inside and clippy
# linting it as it compiles; every suite, the browser tests and the package test run that one
# build, so `make test` never compiles the release profile of the server (`make build` does:
# the same code, optimized).
PHASES := tools fmt-check site+tools-test dev-build unit+postgres alerts+api-fuzz browser+deb-test
test:
	@TEST_BUILD=1 .ci/phases.sh $(PHASES)
	@echo "All checks passed."

# With TEST_BUILD=1 (as `make test` sets it) clippy lints every workspace crate while it is
# compiled, warnings denied (clippy-driver as the workspace's rustc wrapper, which is how
# `cargo clippy` itself runs it), so the dev build, the tests and the wasm build are linted
# without a check of their own; and the dev build embeds the web assets `site` built, as an
# installed Lanes has them. Every cargo command of one `make test` sees the same variables, so
# no step compiles again what another compiled.
ifeq ($(TEST_BUILD),1)
export RUSTC_WORKSPACE_WRAPPER := $(shell rustup which clippy-driver)
export RUSTFLAGS := -Dwarnings
export LANES_SITE_DIR := $(SITE_DIR)
endif

tools:
	@rustup target list --installed | grep -qx wasm32-unknown-unknown \
		|| rustup target add wasm32-unknown-unknown
	@test -x $(BINARYEN_BIN)/wasm-opt \
		|| (mkdir -p $(TOOLS_DIR)/binaryen-$(BINARYEN_VERSION) \
			&& npm install --silent --no-audit --no-fund --prefix $(TOOLS_DIR)/binaryen-$(BINARYEN_VERSION) binaryen@$(BINARYEN_VERSION))

# Headless Chromium for the browser test (Debian's; never a downloaded browser); rootless
# Podman with runc and a static busybox for the container tests (tests/tests/containers.rs
# builds its image offline from busybox: no registry is reachable).
tools-test:
	@command -v chromium >/dev/null \
		|| (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null)
	@fc-list | grep -qi 'Noto Sans CJK' \
		|| (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-noto-cjk >/dev/null)
	@command -v prometheus >/dev/null && command -v debootstrap >/dev/null \
		|| (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus debootstrap >/dev/null)
	@command -v podman >/dev/null && command -v newuidmap >/dev/null && command -v runc >/dev/null && test -x /bin/busybox && command -v slirp4netns >/dev/null \
		|| (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends podman uidmap crun runc conmon catatonit busybox-static slirp4netns >/dev/null)
	@command -v slapd >/dev/null && command -v ldapmodify >/dev/null \
		|| (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slapd ldap-utils >/dev/null)
	@test -d tests/browser/node_modules/playwright-core -a -d tests/browser/node_modules/axe-core -a -d tests/browser/node_modules/oidc-provider \
		|| npm ci --silent --no-audit --no-fund --prefix tests/browser
	@test -x $(LANES_TEST_PYTHON) \
		|| (python3 -m venv $(TOOLS_DIR)/aiosmtpd-$(AIOSMTPD_VERSION) \
			&& $(TOOLS_DIR)/aiosmtpd-$(AIOSMTPD_VERSION)/bin/pip install -q aiosmtpd==$(AIOSMTPD_VERSION))
	@test -x $(SCHEMATHESIS) \
		|| (python3 -m venv $(TOOLS_DIR)/schemathesis-$(SCHEMATHESIS_VERSION) \
			&& $(TOOLS_DIR)/schemathesis-$(SCHEMATHESIS_VERSION)/bin/pip install -q schemathesis==$(SCHEMATHESIS_VERSION))
	@test -f $(LANES_TEST_JUPYTER_WHEELS)/.complete \
		|| (/usr/bin/python3 -m pip download -q --disable-pip-version-check -d $(LANES_TEST_JUPYTER_WHEELS) \
			jupyter-server==$(JUPYTER_SERVER_VERSION) ipykernel==$(IPYKERNEL_VERSION) \
			&& touch $(LANES_TEST_JUPYTER_WHEELS)/.complete)

# Formatting, the server's module graph without cycles, and the server without the terminal
# client (docs/architecture.md).
fmt-check:
	cargo fmt --all -- --check
	python3 .ci/modgraph.py server/src --check >/dev/null
	@deps=$$(cargo tree -p lanes-server -e normal,build --prefix none) \
		&& if grep -q '^lanes-cli ' <<< "$$deps"; then \
			echo "lanes-server depends on lanes-cli: only the lanes program (bin/) may"; exit 1; fi

# Clippy on its own, for developers (`make test` lints as it compiles, TEST_BUILD=1).
clippy:
	cargo clippy --workspace --all-targets -- -D warnings
	cargo clippy -p lanes-app --lib --target wasm32-unknown-unknown --features hydrate -- -D warnings

# The binary the integration tests start, built in the same feature resolution as the tests
# themselves: `-p lanes-server` alone resolves features differently, and every crate that
# depends on a dependency whose features differ would be compiled twice.
dev-build:
	cargo build --workspace --all-targets

# The integration suite runs from its test binary, not through `cargo test`, which holds the
# build directory's lock while tests run: so the two backends' suites can run side by side
# (`unit+postgres`). Its working directory is the one cargo gives it (tests/).
INTEGRATION = bin=$$(.ci/integration-bin) && cd tests && "$$bin"

unit: dev-build
	cargo test --workspace --lib --bins
	cargo test --workspace --doc
	$(INTEGRATION)

# The same integration suite again, every test on a fresh database of the PostgreSQL server at
# $(TEST_POSTGRES) (made and dropped by each test). `--workspace`, as `dev-build` and `unit`:
# `-p lanes-tests` alone resolves features differently and compiled half the dependencies again.
TEST_POSTGRES ?= postgres://postgres@127.0.0.1:5432/postgres
postgres: dev-build
	@psql "$(TEST_POSTGRES)" -tAc 'SELECT 1' >/dev/null \
		|| (echo "make test needs PostgreSQL at $(TEST_POSTGRES) (set TEST_POSTGRES)"; exit 1)
	export LANES_TEST_POSTGRES=$(TEST_POSTGRES) && $(INTEGRATION)

# Schemathesis against the OpenAPI description: no 5xx, no answer outside the schema.
api-fuzz: dev-build
	tests/schemathesis/run.sh target/debug/lanes $(SCHEMATHESIS) $(API_FUZZ_SECONDS)

# Each step of each page's scenario is a named test; files run one at a time (each starts a
# server and a browser, and the machine has two cores).
browser: dev-build
	LANES_BIN=$(TEST_BIN) node --test --test-concurrency=1 --test-reporter=spec tests/browser/*.test.mjs

bench: build
	LANES_SITE_DIR=$(SITE_DIR) cargo build --release -p lanes-bench
	./bench/run.sh

# Refreshes the README screenshot (docs/dashboard.png) from a scripted scenario.
screenshot: build tools-test
	node tests/browser/screenshot.mjs

# Every page in four looks (desktop and phone, light and dark, English and Chinese), with a
# contact sheet per look, in target/tour/: what to look over before calling a page done.
tour: build tools-test
	SCREENSHOT_TOUR=target/tour SCREENSHOT_WAIT=20 node tests/browser/screenshot.mjs

clean:
	cargo clean
