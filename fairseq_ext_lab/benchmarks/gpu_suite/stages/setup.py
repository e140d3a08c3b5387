"""The setup stage (scripts/gpu_suite.sh --help):

install the carried cp312 wheels (.whl/, made here by scripts/gpu_wheels.sh)
into an environment beside the machine's torch, check `import fairseq, torch`,
print the versions and nvidia-smi. Seconds, and a no-op when done already:
start every device call with it. A venv rather than a bare --target folder
on PYTHONPATH, so that fairseq's console scripts sit beside the interpreter,
where tests/conftest.py (fairseq_cli) and the recipes look for them.
"""
import shutil
from pathlib import Path
from typing import List, Sequence

from ..runner import Stage, StageRun, SuiteError, capture, read_stamp, use_env
from ..settings import REPO

#: Run with GPU_PYTHON (argv: REPO): one .pth line per site directory of the interpreter that
#: holds torch (processed like the venv's own, .pth files included), then the repository
#: (fairseq_ext, built in place).
BASE_PTH_LINES = """\
import sys
for path in sys.path:
    if path.endswith(("site-packages", "dist-packages")):
        print(f"import site; site.addsitedir({path!r})")
print(sys.argv[1])
"""

#: Run with the environment's interpreter (argv: GPU_SUITE_REQUIRE_CUDA, GPU_ENV): fairseq from
#: the wheels, the versions, the device.
ENV_CHECK = """\
import os, platform, sys
import fairseq, hydra, numpy, omegaconf, torch
if not os.path.realpath(fairseq.__file__).startswith(os.path.realpath(sys.argv[2]) + os.sep):
    sys.exit(f"fairseq comes from {fairseq.__file__}, not from the wheels in {sys.argv[2]}")
print("python", platform.python_version(), sys.executable)
print("torch", torch.__version__, "| CUDA", torch.version.cuda, "| cuDNN",
      torch.backends.cudnn.version())
print("fairseq", fairseq.__version__, fairseq.__file__)
print("numpy", numpy.__version__, "| hydra", hydra.__version__, "| omegaconf",
      omegaconf.__version__)
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"device {p.name}, capability {p.major}.{p.minor}, {p.multi_processor_count} SMs, "
          f"{p.total_memory / 2**30:.1f} GiB")
elif sys.argv[1] == "1":
    sys.exit("torch sees no CUDA device")
else:
    print("device: none (GPU_SUITE_REQUIRE_CUDA=0)")
"""

PIP_INSTALL = ("-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
               "--no-cache-dir", "--disable-pip-version-check")


def carried_wheels(wheel_dir: Path) -> List[Path]:
    """The wheels in WHEEL_DIR (as the shell's *.whl: no hidden files), sorted."""
    if not wheel_dir.is_dir():
        return []
    return sorted(p for p in wheel_dir.glob("*.whl") if not p.name.startswith(".") and p.is_file())


def wheels_key(wheels: Sequence[Path]) -> str:
    """The wheels' sizes and names, one `SIZE NAME` line each: a second setup with the same
    wheels installs nothing."""
    return "\n".join(sorted(f"{p.stat().st_size} {p.name}" for p in wheels))


def stage_setup(run: StageRun) -> None:
    """Install the carried wheels into GPU_ENV (a venv that sees GPU_PYTHON's packages and the
    repo; else a --target folder on PYTHONPATH), unless the same wheels are in already; check
    `import fairseq, torch` and the device; versions and nvidia-smi into env.txt."""
    s = run.settings
    run.run([s.gpu_python, "--version"])
    wheels = carried_wheels(s.wheel_dir)
    if not wheels and not s.dry_run:
        raise SuiteError(f"no wheels in {s.wheel_dir}: run scripts/gpu_wheels.sh on the CPU machine "
                         "and name .whl in the device call's carry")
    wheel_args = [str(p) for p in wheels] or [f"{s.wheel_dir}/*.whl"]
    key, stamp = wheels_key(wheels), s.gpu_env / ".wheels-installed"
    if read_stamp(stamp) == key:
        print(f"wheels already installed in {s.gpu_env}")
    else:
        run.step(["rm", "-rf", s.gpu_env], lambda: shutil.rmtree(s.gpu_env, ignore_errors=True))
        if run.run([s.gpu_python, "-m", "venv", "--without-pip", s.gpu_env], check=False) == 0:
            # The venv sees the base interpreter's packages (torch...) after its own, and the repo.
            if not s.dry_run:
                venv_python = s.gpu_env / "bin" / "python"
                site_dir = capture([venv_python, "-c", "import sysconfig; "
                                    "print(sysconfig.get_paths()['purelib'])"]).strip()
                pth = capture([s.gpu_python, "-", REPO], input=BASE_PTH_LINES)
                Path(site_dir, "zz_gpu_suite_base.pth").write_text(pth)
            # pip runs from the base interpreter's packages; --ignore-installed: into the venv
            # even where the base has the same version.
            run.run([s.gpu_env / "bin" / "python", *PIP_INSTALL, "--ignore-installed", *wheel_args])
        else:
            print(f"no venv could be made: installing into {s.gpu_env}/site, on PYTHONPATH", flush=True)
            run.step(["rm", "-rf", s.gpu_env], lambda: shutil.rmtree(s.gpu_env, ignore_errors=True))
            run.run([s.gpu_python, *PIP_INSTALL, "--upgrade", "--target", f"{s.gpu_env}/site",
                     *wheel_args])
        if not s.dry_run:
            stamp.write_text(key + "\n")
    use_env(run)
    env_txt = run.outdir / "env.txt"
    run.run([run.py, "-", "1" if s.require_cuda else "0", s.gpu_env], input=ENV_CHECK, tee=env_txt)
    if s.dry_run or shutil.which("nvidia-smi"):
        run.run(["nvidia-smi"], tee=env_txt, append=True)
    elif s.require_cuda:
        raise SuiteError("nvidia-smi not found")
    if s.dry_run or shutil.which("nvcc"):
        run.run(["nvcc", "--version"], tee=env_txt, append=True)


STAGE = Stage("setup", stage_setup, "install the carried wheels beside the machine's torch", __doc__)
