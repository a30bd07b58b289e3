# lit configuration for torchneuron's MLIR regression tests (run: `lit test` or `make test`).
import os

import lit.formats

config.name = "torchneuron"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]
config.excludes = ["python", "Inputs"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.test_source_root, "Output")
# neuron-opt and filecheck come from the environment the suite runs in (the project's venv).
config.environment["PATH"] = os.environ.get("PATH", "")
config.substitutions.append(("FileCheck", "filecheck"))
