"""The suite's stages, one module each (each exports its :class:`~..runner.Stage` as
``STAGE``), and :data:`STAGES`, the table of them in the order the suite runs them."""
from typing import Dict

from ..runner import Stage
from . import bench_3ml, bench_bidir, bench_swishrnn, build, fsdp, setup, step, study, tests, train

#: The stage table, in the order the suite runs them.
STAGES: Dict[str, Stage] = {module.STAGE.name: module.STAGE for module in (
    setup, build, step, tests, bench_swishrnn, bench_3ml, bench_bidir, train, fsdp, study)}
ALL_STAGES = tuple(STAGES)
#: Names --stages takes besides the stages' own.
ALIASES = {"all": ALL_STAGES, "bench": ("step", "bench_swishrnn", "bench_3ml", "bench_bidir")}
