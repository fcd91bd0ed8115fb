# torch-fl developer entry points. The README's two commands are `make certify`
# and `make test`; both build what they need into .venv first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip

# The second CI environment: the same sources and the same flemu library under
# another torch release (requirements-torch2.14.txt). Its bridge has its own
# build dir; build/{wheel_tag} belongs to .venv's build.
VENV_T214 := .venv-torch2.14
PY_T214   := $(VENV_T214)/bin/python
PIP_T214  := $(VENV_T214)/bin/pip

.PHONY: certify demo test test-torch2.14 check-torch2.14 build build-torch2.14 browser bench venv venv-torch2.14 clean

# The certification level and where its report goes (`make certify LEVEL=L2`).
LEVEL  ?= L3
REPORT ?= reports/flemu

# Main job: a short demo on flemu, then its certification report.
certify: demo
	$(VENV)/bin/torchfl-conformance run --plugin flemu --level $(LEVEL) --report $(REPORT) -j 2

demo: build
	$(PY) examples/demo.py

# flemu checks every kernel call against what the bridge promised (and
# guards every allocation) while the project's own tests run; then flemu cut
# to a new vendor's twelve kernels (FLEMU_PROFILE=minimal) must certify at L1
# through the fallback chain; then the same flemu library under torch 2.14.1.
# The torch 2.14.1 environment is built first: its CUDA wheels hold the cuBLAS
# header that tests/cuda_plugin checks the CUDA plugin's constants against.
test: build build-torch2.14 browser
	FLEMU_CHECK_CONTRACTS=1 $(PY) -m pytest -q
	FLEMU_PROFILE=minimal $(VENV)/bin/torchfl-conformance run --plugin flemu --level L1 -j 2 --report reports/flemu-minimal
	$(MAKE) --no-print-directory check-torch2.14

# Under torch 2.14.1: the bridge's tests, then an L1 certification of the very
# libflemu.so .venv built (the report's SHA-256 is compared with it). `make test`
# runs it; alone it needs .venv built first: `make build test-torch2.14`.
test-torch2.14: build-torch2.14
	$(MAKE) --no-print-directory check-torch2.14

check-torch2.14:
	FLEMU_CHECK_CONTRACTS=1 $(PY_T214) -m pytest -q tests/bridge
	$(VENV_T214)/bin/torchfl-conformance run --plugin flemu --level L1 -j 2 --report reports/torch2.14
	lib="$$($(PY) -c 'import flemu; print(flemu.library_path())')" && \
	$(PY_T214) -c "import json, sys; got = json.load(open(sys.argv[1]))['plugin']['library_sha256']; \
	  sys.exit(None if got == sys.argv[2] else f'certified flemu {got}, .venv built {sys.argv[2]}')" \
	  reports/torch2.14/report.json "$$(sha256sum < "$$lib" | cut -d' ' -f1)"

# tests/conformance/test_report_html.py renders a report in headless Chromium
# (Debian's package); it fails, rather than skips, where chromium is missing.
browser:
	@test -x /usr/bin/chromium || { \
	  sudo=""; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
	  $$sudo apt-get update -qq && \
	  $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

# The summary of a complete run (.benchmarks/summary.md) replaces the README's
# table: the README shows what this command gave.
bench: build
	$(PY) -m pytest bench -q --benchmark-columns=min,median,mean,rounds --benchmark-sort=name
	$(PY) bench/summary.py README.md

# Builds the flemu reference plugin and the bridge. Autoload is off while pip
# imports torch so a half-installed plugin cannot break the build.
# The bridge is built with profile-guided optimization (GCC): an instrumented
# build, in its own build dir and installed outside .venv, trains the profile
# on flemu (sdk/tools/pgo_train.py); the bridge .venv gets is compiled with
# it. `make build PGO=0` builds it without (CMakeLists.txt, TORCH_FL_PGO).
PGO     ?= 1
PGO_DIR := $(abspath build/pgo)
PIP_BUILD := TORCH_DEVICE_BACKEND_AUTOLOAD=0 $(PIP) install --quiet --no-build-isolation --no-deps

build: venv
	$(PIP_BUILD) ./reference_backend
ifeq ($(PGO),1)
	rm -rf $(PGO_DIR)/profile $(PGO_DIR)/site
	$(PIP_BUILD) --target $(PGO_DIR)/site -C build-dir=$(PGO_DIR)/generate \
	  -C cmake.define.TORCH_FL_PGO=generate -C cmake.define.TORCH_FL_PGO_DIR=$(PGO_DIR)/profile .
	PYTHONPATH=$(PGO_DIR)/site $(PY) sdk/tools/pgo_train.py
	@ls $(PGO_DIR)/profile/*.gcda > /dev/null 2>&1 || { \
	  echo "make build: the instrumented bridge wrote no profile to $(PGO_DIR)/profile (GCC builds one; make build PGO=0 builds without)"; exit 1; }
	$(PIP_BUILD) -C build-dir=$(PGO_DIR)/use \
	  -C cmake.define.TORCH_FL_PGO=use -C cmake.define.TORCH_FL_PGO_DIR=$(PGO_DIR)/profile .
else
	$(PIP_BUILD) -C cmake.define.TORCH_FL_PGO= .
endif

# The bridge rebuilt for torch 2.14 (C++20, CMakeLists.txt decides); flemu is not
# rebuilt: .venv's installed copy (package, library, entry points) is copied in.
build-torch2.14: venv-torch2.14
	TORCH_DEVICE_BACKEND_AUTOLOAD=0 $(PIP_T214) install --quiet --no-build-isolation --no-deps -C build-dir=build/torch2.14 .
	src="$$($(PY) -c 'import flemu, os; print(os.path.dirname(os.path.dirname(flemu.__file__)))')" && \
	dst="$$($(PY_T214) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" && \
	rm -rf "$$dst"/flemu "$$dst"/flemu-*.dist-info && \
	cp -R "$$src"/flemu "$$src"/flemu-*.dist-info "$$dst"/

venv: $(VENV)/.installed

venv-torch2.14: $(VENV_T214)/.installed

$(VENV_T214)/.installed: requirements-torch2.14.txt
	test -x $(PY_T214) || $(PYTHON) -m venv $(VENV_T214)
	$(PIP_T214) install --quiet -r requirements-torch2.14.txt
	touch $@

$(VENV)/.installed: requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet -r requirements-dev.txt
	touch $@

clean:
	rm -rf build reference_backend/build
