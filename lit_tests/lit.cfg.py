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
