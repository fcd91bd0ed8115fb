# torch-fl developer entry points. The README's two commands are `make certify`
# and `make test`; both build what they need into .venv first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip

.PHONY: certify demo test bench build venv clean

# The certification level and where its report goes (`make certify LEVEL=L2`).
LEVEL  ?= L3
REPORT ?= reports/flemu

# Main job: a short demo on flemu, then its certification report.
certify: demo
	$(VENV)/bin/torchfl-conformance run --plugin flemu --level $(LEVEL) --report $(REPORT) -j 2

demo: build
	$(PY) examples/demo.py

# flemu checks every kernel call against what the bridge promised (and
# guards every allocation) while the project's own tests run.
test: build
	FLEMU_CHECK_CONTRACTS=1 $(PY) -m pytest -q

bench: build
	$(PY) -m pytest bench -q --benchmark-columns=min,median,mean,rounds --benchmark-sort=name

# Builds the bridge and the flemu reference plugin. Autoload is off while pip
# imports torch so a half-installed plugin cannot break the build.
build: venv
	TORCH_DEVICE_BACKEND_AUTOLOAD=0 $(PIP) install --quiet --no-build-isolation --no-deps . ./reference_backend

venv: $(VENV)/.installed

$(VENV)/.installed: requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet -r requirements-dev.txt
	touch $@

clean:
	rm -rf build reference_backend/build
