"""The GPU suite's entry, run by its path (scripts/gpu_suite.sh: `GPU_PYTHON -S
fairseq_ext_lab/benchmarks/gpu_suite/__main__.py ARGS`; the driver starts each stage so, too): the
package is imported as a top-level ``gpu_suite`` from fairseq_ext_lab/benchmarks/, not through
``fairseq_ext_lab``, whose __init__ imports the plugin and so fairseq, which the GPU machine
lacks until the setup stage has run."""
import sys
from pathlib import Path

if not __package__:  # run by its path: this folder is sys.path[0], its parent is wanted
    HERE = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
    sys.path.insert(0, str(HERE.parent))
    from gpu_suite.driver import main
else:
    from .driver import main

if __name__ == "__main__":
    sys.exit(main())
