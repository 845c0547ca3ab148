# Two entry points; each sets up .venv on a fresh machine first.
#   make tune   - tune the bundled example (a ResNet basic block) with a small budget
#   make test   - all tests: pytest + lit
PY ?= python3.11
VENV := .venv
STAMP := $(VENV)/.installed
DEVICES := $(VENV)/.devices

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[test]'
	touch $(STAMP)

# Devices beyond this machine: qemu, the arm64 libc, llvm-mca, the aarch64 IREE runtime, sshd.
$(DEVICES): $(STAMP) tools/setup_devices.sh
	tools/setup_devices.sh $(VENV)/bin/python
	touch $(DEVICES)

.PHONY: tune test
tune: $(STAMP)
	$(VENV)/bin/python -m mlir_ansor.tune resnet_block --out ansor_out

test: $(STAMP) $(DEVICES)
	$(VENV)/bin/python -m pytest -q -rs --durations=15 -n 2 --dist loadscope
	$(VENV)/bin/lit -v lit_tests
