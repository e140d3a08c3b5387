"""Build and load the host emulation of the SwishRNN CUDA kernels (test only).

The kernels of ``fairseq_ext/ops/csrc/swish_recurrence_kernels.cu`` and their torch binding
``swish_recurrence_cuda.cpp`` are compiled as plain C++ against ``tests/cuda_host/`` (a shim of
the CUDA they use: ``cuda_host_shim.h``), and their grid runs as a loop over (block, thread). The
.cu is read as it is in the repository, and its launches ``kernel<<<grid, block, shmem,
stream>>>(args)`` are rewritten mechanically into ``cuda_host::launch(kernel, {grid, block, shmem,
stream}, args)``: nothing else changes. ``tests/cuda_host/swish_recurrence_host.cpp`` includes
both and registers the ops of the namespace ``fairseq_ext_cuda_host`` (its comment lists them).

The library is built with the C++ compiler (``$CXX``, else ``c++``) against torch's headers and
libraries (``torch.utils.cpp_extension.include_paths`` / ``library_paths``), once per content:
``build/cuda-host-emulation/swish_cuda_host_<hash>.so``, the hash over every input (the .cu, the
binding and its header, the shim, the flags, torch's version), under a file lock so that
pytest-xdist workers build it once. ``CUDA_HOST_KERNELS=PATH`` checks another copy of the .cu
instead (a deliberately broken one, to see the tests fail).
"""
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import torch
from torch.utils import cpp_extension

REPO_ROOT = Path(__file__).resolve().parents[1]
CSRC = REPO_ROOT / "fairseq_ext" / "ops" / "csrc"
KERNELS = CSRC / "swish_recurrence_kernels.cu"
BINDING_SOURCES = (CSRC / "swish_recurrence_cuda.cpp", CSRC / "swish_recurrence_checks.h")
SHIM = Path(__file__).resolve().parent / "cuda_host"
HOST_SOURCE = SHIM / "swish_recurrence_host.cpp"
BUILD = REPO_ROOT / "build" / "cuda-host-emulation"
KERNELS_ENV = "CUDA_HOST_KERNELS"
NAMESPACE = "fairseq_ext_cuda_host"
#: ``kernel<<<config>>>(``, the kernel a name with at most one template argument list.
LAUNCH = re.compile(r"\b(?P<kernel>[A-Za-z_]\w*(?:\s*<[^<>;(){}]*>)?)\s*<<<(?P<config>.*?)>>>"
                    r"\s*\((?P<empty>\s*\))?", re.S)


def rewrite_launches(source: str) -> tuple:
    """(source with each ``kernel<<<config>>>(args)`` as ``cuda_host::launch(kernel,
    cuda_host::LaunchConfig{config}, args)``, the number of launches rewritten). Raises
    ValueError if a ``<<<`` or ``>>>`` is left (a launch this rewrite does not understand)."""
    def launch(match):
        rest = ")" if match["empty"] else ", "
        return f"cuda_host::launch({match['kernel']}, cuda_host::LaunchConfig{{{match['config']}}}{rest}"

    rewritten, count = LAUNCH.subn(launch, source)
    for line_number, line in enumerate(rewritten.splitlines(), 1):
        if "<<<" in line or ">>>" in line:
            raise ValueError(f"line {line_number}: a launch the host emulation cannot rewrite: "
                             f"{line.strip()}")
    return rewritten, count


def kernels_path() -> Path:
    return Path(os.environ.get(KERNELS_ENV) or KERNELS).resolve()


def compiler() -> str:
    return os.environ.get("CXX") or "c++"


def compile_command(source: Path, include_dir: Path, output: Path) -> list:
    torch_includes = [flag for path in cpp_extension.include_paths()
                      for flag in ("-isystem", path)]
    torch_libraries = cpp_extension.library_paths()
    return [
        compiler(), "-std=c++20", "-O2", "-fPIC", "-shared", "-fvisibility=hidden",
        # every operation rounded on its own, on any host (see cuda_host_shim.h)
        "-ffp-contract=off",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        # the shim's headers first: they stand in for CUDA's and for ATen's CUDA ones
        "-I", str(SHIM), "-I", str(include_dir), "-I", str(CSRC),
        *torch_includes, "-isystem", sysconfig.get_paths()["include"],
        str(source), "-o", str(output),
        *(f"-L{path}" for path in torch_libraries),
        *(f"-Wl,-rpath,{path}" for path in torch_libraries),
        "-lc10", "-ltorch_cpu", "-ltorch",
    ]


def build() -> Path:
    """The emulation library of the current sources (built if it is not there yet; a scratch
    copy named by $CUDA_HOST_KERNELS in a folder of its own)."""
    kernels = kernels_path()
    folder = BUILD / "scratch" if os.environ.get(KERNELS_ENV) else BUILD
    rewritten, count = rewrite_launches(kernels.read_text())
    if count == 0:
        raise ValueError(f"{kernels} launches no kernel")
    included = f'#line 1 "{kernels}"\n{rewritten}'
    digest = hashlib.sha256()
    for part in [included, torch.__version__, " ".join(compile_command(HOST_SOURCE, BUILD, BUILD))]:
        digest.update(part.encode())
    for path in [*BINDING_SOURCES, *sorted(p for p in SHIM.rglob("*") if p.is_file())]:
        digest.update(path.name.encode() + path.read_bytes())
    key = digest.hexdigest()[:16]
    library = folder / f"swish_cuda_host_{key}.so"
    include_dir = folder / f"src-{key}"
    if library.exists():
        return library
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building the same
        if library.exists():
            return library
        include_dir.mkdir(exist_ok=True)
        (include_dir / "swish_recurrence_kernels_host.inc").write_text(included)
        partial = library.with_suffix(f".{os.getpid()}.tmp")
        proc = subprocess.run(compile_command(HOST_SOURCE, include_dir, partial),
                              capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            raise RuntimeError(f"the host emulation of {kernels} does not compile:\n"
                               f"{proc.stderr[-8000:]}")
        os.replace(partial, library)
    for old in folder.glob("swish_cuda_host_*.so"):  # the builds of older sources
        if old != library:
            old.unlink(missing_ok=True)
    for old in folder.glob("src-*"):
        if old != include_dir:
            shutil.rmtree(old, ignore_errors=True)
    return library


_loaded = None


def load():
    """``torch.ops.fairseq_ext_cuda_host`` of the current sources (built and loaded once per
    process)."""
    global _loaded
    library = build()
    if _loaded is None:
        torch.ops.load_library(str(library))
        _loaded = library
    elif _loaded != library:
        raise RuntimeError(f"{_loaded.name} is loaded already; the sources changed since "
                           f"(a process loads one build)")
    return getattr(torch.ops, NAMESPACE)
