import os
import sys

import lit.formats

config.name = "mlir-ansor"
config.test_format = lit.formats.ShTest()
config.suffixes = [".py"]
config.excludes = ["lit.cfg.py", "helpers.py"]
config.test_source_root = os.path.dirname(__file__)
root = os.path.dirname(config.test_source_root)
config.environment["PYTHONPATH"] = root
bindir = os.path.dirname(sys.executable)
config.substitutions.append(("%PYTHON", sys.executable))
config.substitutions.append(("FileCheck", os.path.join(bindir, "filecheck")))
config.substitutions.append(("%DATA", os.path.join(root, "tests", "data")))
# Tests of AArch64 code need llvm-mca >= 17 (tools/setup_devices.sh installs llvm-19); without
# it lit lists them as UNSUPPORTED.
sys.path.insert(0, root)
from mlir_ansor.errors import ToolchainError  # noqa: E402
from mlir_ansor.tuner.mca import find_mca  # noqa: E402

try:
    find_mca()
    config.available_features.add("llvm-mca")
except ToolchainError as e:
    lit_config.note(f"llvm-mca feature absent: {e}")
