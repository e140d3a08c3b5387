"""The build stage (scripts/gpu_suite.sh --help):

compile fairseq_ext.ops._C with its CUDA kernels (setup.py build_ext --inplace),
check that fairseq_ext::swish_recurrence has a CUDA kernel; copies the built
module to OUTDIR/prebuilt/, which a later call can carry as .gpu-build/ to
skip the compile (it is reused only if setup.py, fairseq_ext/ops/csrc/*, torch
and the GPU's compute capability are the same).
"""
import hashlib
import os
import shutil
from pathlib import Path

from ..runner import Stage, StageRun, capture, read_stamp, use_env
from ..settings import REPO

#: Run with the environment's interpreter in REPO (argv: GPU_SUITE_REQUIRE_CUDA): the op has a
#: kernel for the device, and on CUDA it matches the reference.
KERNEL_CHECK = """\
import sys
import torch
from fairseq_ext.ops import swish_recurrence as ops
print("fairseq_ext.ops._C:", getattr(ops.EXTENSION, "__file__", None))
print("kernels of fairseq_ext::swish_recurrence for:", ops.NATIVE_OP_DEVICES,
      "| CPU kernels:", ops.cpu_kernels())
want = "cuda" if sys.argv[1] == "1" else "cpu"
if want not in ops.NATIVE_OP_DEVICES:
    sys.exit(f"no {want} kernel registered: the build failed (setup.py only warns), see above")
if want == "cuda":
    x = torch.randn(64, 4, 32, device="cuda")
    a, b = torch.randn(32, device="cuda"), torch.randn(32, device="cuda")
    out = torch.ops.fairseq_ext.swish_recurrence(x, a, b, 2)
    ref = ops.swish_recurrence_reference(x, a, b, 2)
    torch.testing.assert_close(out, ref)
    print("CUDA kernel ran; matches the reference at (64, 4, 32), k = 2")
"""

TORCH_AND_DEVICE = ("import torch; print(torch.__version__, "
                    "torch.cuda.is_available() and torch.cuda.get_device_capability())")


def copy_into_place(source, target) -> None:
    """Copy file `source` to `target` through a temporary file and a rename, so that a process
    that has the old `target` loaded (a shared library) keeps its copy intact."""
    partial = f"{target}.partial-{os.getpid()}"
    shutil.copy(source, partial)
    os.replace(partial, target)


def build_key(py: str) -> str:
    """What the compiled module depends on, hashed: setup.py, fairseq_ext/ops/csrc/*, the torch
    version and the GPU's compute capability. A prebuilt module is used only if this matches."""
    digest = hashlib.sha256((REPO / "setup.py").read_bytes())
    for source in sorted((REPO / "fairseq_ext" / "ops" / "csrc").iterdir()):
        if source.is_file():
            digest.update(source.read_bytes())
    digest.update(capture([py, "-c", TORCH_AND_DEVICE]).encode())
    return digest.hexdigest()[:16]


def stage_build(run: StageRun) -> None:
    """Compile fairseq_ext.ops._C with its CUDA kernels (or take the carried prebuilt one, or the one
    built in this machine already, when its key matches), check the op's kernel, and copy the
    module and its key to OUTDIR/prebuilt/."""
    s = run.settings
    py = use_env(run)
    os.chdir(REPO)
    suffix, key = ".cpython-312-x86_64-linux-gnu.so", "dry-run"
    if not s.dry_run:
        suffix = capture([py, "-c", "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))"])
        suffix, key = suffix.strip(), build_key(py)
    so, prebuilt = f"fairseq_ext/ops/_C{suffix}", s.prebuilt / f"_C{suffix}"
    build_stamp = s.gpu_env / ".build-key"
    if prebuilt.is_file() and read_stamp(s.prebuilt / "key") == key:
        print(f"using the prebuilt {prebuilt} (key {key})", flush=True)
        run.step(["cp", prebuilt, so], lambda: copy_into_place(prebuilt, so))
    elif Path(so).is_file() and read_stamp(build_stamp) == key:
        print(f"{so} is built already (key {key})", flush=True)
    else:
        # setup.py's CUDA_ARCH_LIST (TORCH_CUDA_ARCH_LIST=native: only the GPU's own).
        run.run([py, "setup.py", "-q", "build_ext", "--inplace"],
                extra_env={"MAX_JOBS": os.environ.get("MAX_JOBS") or "16"})
        if not s.dry_run:
            build_stamp.write_text(key + "\n")
    run.run([py, "-", "1" if s.require_cuda else "0"], input=KERNEL_CHECK)
    target = run.outdir / "prebuilt"
    run.step(["mkdir", "-p", target], lambda: target.mkdir(parents=True, exist_ok=True))
    run.step(["cp", so, f"{target}/"], lambda: shutil.copy(so, target))
    if not s.dry_run:
        (target / "key").write_text(key + "\n")


STAGE = Stage("build", stage_build, "compile fairseq_ext.ops._C with its CUDA kernels, check the op", __doc__)
