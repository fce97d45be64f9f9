# lit configuration for flashtile's pass tests: each test file is named after the pass flag it checks.
import os
import lit.formats

config.name = "flashtile"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.flashtile_obj_root, "tests", "lit")
config.excludes = ["inputs"]
config.environment["PATH"] = os.pathsep.join(
    [config.flashtile_tools_dir, config.llvm_tools_dir, config.environment.get("PATH", os.environ["PATH"])])
config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "inputs")))
