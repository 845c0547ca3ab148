# Two entry points; each sets up .venv on a fresh machine first.
#   make tune   - tune the bundled example (a ResNet basic block) with a small budget
#   make test   - all tests: pytest + lit
PY ?= python3.11
VENV := .venv
STAMP := $(VENV)/.installed
CROSS := $(VENV)/.cross-aarch64

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[test]'
	touch $(STAMP)

# AArch64 from this machine: qemu, the arm64 libc, llvm-mca, the aarch64 IREE runtime.
$(CROSS): $(STAMP) tools/setup_cross.sh
	tools/setup_cross.sh $(VENV)/bin/python
	touch $(CROSS)

.PHONY: tune test
tune: $(STAMP)
	$(VENV)/bin/python -m mlir_ansor.tune resnet_block --out ansor_out

test: $(STAMP) $(CROSS)
	$(VENV)/bin/python -m pytest -q -rs
	$(VENV)/bin/lit -v lit_tests
