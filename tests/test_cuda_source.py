"""The CUDA kernels of fairseq_ext::swish_recurrence compile with nvcc, on every ``make test``.

``swish_recurrence_kernels.cu`` includes no torch header (the CPU torch wheel lacks the CUDA
ones), so it compiles on a machine with no GPU and no CUDA toolkit: ``make test`` installs CUDA's
compiler as wheels (``requirements-nvcc.txt``, unpacked to ``site-packages/nvidia/cu13``). The
compile uses the flags the real build gives nvcc (torch's ``COMMON_NVCC_FLAGS``, setup.py's
``COMPILE_ARGS["nvcc"]``, C++20 as torch's ``BuildExtension`` adds it) for every architecture of
setup.py's ``CUDA_ARCH_LIST``. Running the kernels needs a GPU
(``tests/test_swish_recurrence_op.py``); ``tests/test_cuda_host_emulation.py`` runs their lines on
the CPU.
"""
import ast
import collections
import importlib.metadata
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from torch.utils import cpp_extension

from conftest import REPO_ROOT
from fairseq_ext.ops.swish_recurrence import COLUMNS_PER_THREAD_ENV

KERNELS = REPO_ROOT / "fairseq_ext" / "ops" / "csrc" / "swish_recurrence_kernels.cu"
NVCC_WHEEL = "nvidia-cuda-nvcc"
DTYPE_SUFFIXES = ("f32", "f64", "f16", "bf16")


def setup_constant(name: str):
    """The literal value of the module-level assignment ``name = ...`` in setup.py (read, not
    run: running setup.py would build)."""
    tree = ast.parse((REPO_ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(target, ast.Name) and target.id == name for target in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"setup.py has no module-level {name} = <literal>")


def wheel_nvcc():
    """nvcc of the ``nvidia-cuda-nvcc`` wheel (requirements-nvcc.txt), or None if not installed."""
    try:
        distribution = importlib.metadata.distribution(NVCC_WHEEL)
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in distribution.files or ():
        if file.name == "nvcc" and file.parent.name == "bin":
            return Path(distribution.locate_file(file))
    return None


def find_nvcc() -> Path:
    """The wheel's nvcc; without the wheel, a CUDA toolkit's (the lent GPU machines have one and
    reach no registry), except on CI, which must not depend on one."""
    nvcc = wheel_nvcc()
    if nvcc is not None:
        return nvcc
    install = "pip install -r requirements-nvcc.txt -c constraints.txt (make test does)"
    if os.environ.get("CI"):
        pytest.fail(f"the {NVCC_WHEEL} wheel is not installed: {install}")
    toolkit = shutil.which("nvcc") or (
        cpp_extension.CUDA_HOME and shutil.which("nvcc", path=str(Path(cpp_extension.CUDA_HOME,
                                                                        "bin"))))
    if not toolkit:
        pytest.fail(f"no nvcc: {install}")
    return Path(toolkit)


def cuda_include_dirs(nvcc: Path) -> list:
    """Where cuda_runtime.h is for a C++ compiler: beside the wheel's bin/, or in the CUDA
    toolkit's include/ (a toolkit's nvcc finds it by itself, g++ does not)."""
    homes = [nvcc.parent.parent, *([Path(cpp_extension.CUDA_HOME)] if cpp_extension.CUDA_HOME
                                   else [])]
    return [str(home / "include") for home in homes if (home / "include/cuda_runtime.h").is_file()]


def nvcc_include_flags(nvcc: Path) -> list:
    """The wheel's headers (cuda_runtime.h, cuda_fp16.h...) are beside its bin/; a toolkit's nvcc
    finds its own."""
    include = nvcc.parent.parent / "include"
    return ["-I", str(include)] if (include / "cuda_runtime.h").is_file() else []


def arch_flags() -> list:
    """The -gencode flags torch gives nvcc for setup.py's CUDA_ARCH_LIST (torch's own
    translation, as setup.py's build does through TORCH_CUDA_ARCH_LIST)."""
    saved = os.environ.get("TORCH_CUDA_ARCH_LIST")
    os.environ["TORCH_CUDA_ARCH_LIST"] = setup_constant("CUDA_ARCH_LIST")
    try:
        return cpp_extension._get_cuda_arch_flags()
    finally:
        if saved is None:
            del os.environ["TORCH_CUDA_ARCH_LIST"]
        else:
            os.environ["TORCH_CUDA_ARCH_LIST"] = saved


def build_flags() -> list:
    """nvcc's flags in the real build of the .cu (torch's BuildExtension: COMMON_NVCC_FLAGS,
    -fPIC for the host code, setup.py's nvcc args, the architectures, -std=c++20)."""
    return (cpp_extension.COMMON_NVCC_FLAGS + ["--compiler-options", "-fPIC"]
            + setup_constant("COMPILE_ARGS")["nvcc"] + arch_flags() + ["-std=c++20"])


def run_nvcc(nvcc: Path, args: list) -> None:
    proc = subprocess.run([str(nvcc), *nvcc_include_flags(nvcc), *args], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, f"nvcc {' '.join(args)}\n{proc.stdout}\n{proc.stderr}"


@pytest.fixture(scope="module")
def nvcc() -> Path:
    return find_nvcc()


@pytest.fixture(scope="module")
def kernels_object(nvcc, tmp_path_factory) -> Path:
    """The .cu compiled as setup.py's build compiles it."""
    out = tmp_path_factory.mktemp("nvcc") / "swish_recurrence_kernels.o"
    run_nvcc(nvcc, ["-c", *build_flags(), str(KERNELS), "-o", str(out)])
    return out


def test_setup_builds_for_named_architectures():
    """setup.py names its architectures (not torch's default, the GPUs visible at build time),
    and the compile below gets machine code for each and PTX for those marked +PTX."""
    arch_list = setup_constant("CUDA_ARCH_LIST").split(";")
    flags = arch_flags()
    assert arch_list and len(flags) == len(arch_list) + sum("+PTX" in a for a in arch_list)
    for arch in arch_list:
        number = arch.replace("+PTX", "").replace(".", "")
        assert f"-gencode=arch=compute_{number},code=sm_{number}" in flags
        assert (f"-gencode=arch=compute_{number},code=compute_{number}" in flags) == (
            "+PTX" in arch)


def test_ci_uses_the_wheels_nvcc(nvcc):
    """make test installs requirements-nvcc.txt, so the wheel's nvcc is the one used (never a
    toolkit that happens to be on the developer's machine), at the pinned version."""
    if os.environ.get("CI") or wheel_nvcc() is not None:
        pinned = re.search(r"^nvidia-cuda-nvcc==(\S+)", (REPO_ROOT / "requirements-nvcc.txt")
                           .read_text(), re.M).group(1)
        assert importlib.metadata.version(NVCC_WHEEL) == pinned
        version = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True,
                                 check=True).stdout
        assert f"release {'.'.join(pinned.split('.')[:2])}" in version, version
    else:
        pytest.skip(f"{NVCC_WHEEL} is not installed here; compiling with {nvcc}")


HOST_SOURCE = REPO_ROOT / "fairseq_ext" / "ops" / "csrc" / "swish_recurrence_cuda.cpp"


@pytest.mark.heavy
def test_cuda_host_code_parses_against_torchs_headers(nvcc, tmp_path):
    """swish_recurrence_cuda.cpp (the op's CUDA registration: guards, streams, dispatch) goes
    through the C++ compiler with torch's headers and the nvcc wheel's CUDA headers, as the real
    build compiles it (setup.py's cxx flags, C++17), syntax only: there is no CUDA torch here to
    link against. The CPU torch wheel lacks one generated header of its CUDA build,
    c10/cuda/impl/cuda_cmake_macros.h (one macro: c10's CUDA library is shared); it is written
    here with what the CUDA wheels hold, where torch's own include folders lack it."""
    import sysconfig

    compiler = os.environ.get("CXX", "g++")
    if shutil.which(compiler) is None:
        pytest.fail(f"no C++ compiler ({compiler}): the extension's build needs one too")
    includes = [*cpp_extension.include_paths(), *cuda_include_dirs(nvcc),
                sysconfig.get_paths()["include"]]
    if not any(Path(d, "c10/cuda/impl/cuda_cmake_macros.h").exists() for d in includes):
        macros = tmp_path / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h"
        macros.parent.mkdir(parents=True)
        macros.write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
        includes.append(str(tmp_path))
    args = [compiler, "-fsyntax-only", "-std=c++17", *setup_constant("COMPILE_ARGS")["cxx"],
            "-DTORCH_API_INCLUDE_EXTENSION_H", "-DTORCH_EXTENSION_NAME=_C",
            *(f"-I{d}" for d in includes), str(HOST_SOURCE)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300)
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert proc.returncode == 0, "\n".join(errors[:20]) or proc.stderr[-4000:]


def test_no_braced_dim_lists_in_the_native_sources():
    """``t.sum({0, 1})`` is ambiguous in torch 2.11's headers (IntArrayRef against DimnameList):
    the first build on the lent GPU machine (torch 2.11) failed on it, while this machine's
    torch, whose headers no longer declare the DimnameList overload, compiles it. The sources
    name their dims as an ``at::IntArrayRef`` instead."""
    pattern = re.compile(r"\.(sum|mean|amax|amin|std|var|norm|flip|permute)\(\s*\{")
    offenders = [f"{path.name}:{number}: {line.strip()}"
                 for path in sorted(KERNELS.parent.glob("*.c*")) if path.suffix in (".cpp", ".cu")
                 for number, line in enumerate(path.read_text().splitlines(), 1)
                 if pattern.search(line)]
    assert not offenders, offenders


def test_the_kernels_read_the_python_name_of_their_switch():
    """The environment variable the launchers read is the one the ops module and the benchmark
    set (``COLUMNS_PER_THREAD_ENV``)."""
    assert f'kColumnsPerThreadEnv = "{COLUMNS_PER_THREAD_ENV}"' in KERNELS.read_text()


@pytest.mark.heavy
def test_cuda_kernels_compile_with_nvcc(kernels_object):
    """Every launcher the torch binding calls is defined, with the binding's signature."""
    symbols = subprocess.run(["nm", "-C", str(kernels_object)], capture_output=True, text=True,
                             check=True).stdout
    for suffix in DTYPE_SUFFIXES:
        assert f"T fairseq_ext::launch_swish_recurrence_forward_{suffix}(" in symbols
        assert f"T fairseq_ext::launch_swish_recurrence_backward_{suffix}(" in symbols
    assert ("launch_swish_recurrence_backward_f64(double const*, double const*, double const*, "
            "double const*, double const*, double*, double*, double*") in symbols
    assert ("launch_swish_recurrence_backward_bf16(__nv_bfloat16 const*, __nv_bfloat16 const*, "
            "__nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16*, "
            "float*, float*") in symbols


def ptx_entries(ptx: str) -> dict:
    """{mangled kernel name: its PTX body} of a .ptx file."""
    parts = re.split(r"(?m)^\.(?:visible )?\.?entry ", ptx)
    return {part.split("(", 1)[0]: part for part in parts[1:]}


@pytest.fixture(scope="module")
def kernels_ptx(nvcc, tmp_path_factory) -> dict:
    """{mangled kernel name: PTX body} of the .cu for sm_90 with setup.py's nvcc flags, compiled
    as C++17 (which the kernels also keep to: an older torch's BuildExtension gives nvcc
    -std=c++17)."""
    ptx = tmp_path_factory.mktemp("ptx") / "kernels.ptx"
    run_nvcc(nvcc, ["-ptx", "-std=c++17", *cpp_extension.COMMON_NVCC_FLAGS,
                    *setup_constant("COMPILE_ARGS")["nvcc"], "-arch=sm_90", str(KERNELS),
                    "-o", str(ptx)])
    return ptx_entries(ptx.read_text())


def instantiations(entries: dict, type_code: str, pack: int) -> dict:
    """The kernels instantiated for one element type (Itanium code: d, f, 6__half,
    13__nv_bfloat16) and columns per thread."""
    found = {name: body for name, body in entries.items()
             if re.search(rf"_kernelI{re.escape(type_code)}Li{pack}EE", name)}
    assert len(found) == 2, (type_code, pack, list(entries))  # forward and backward
    return found


@pytest.mark.heavy
def test_fp64_kernels_compute_in_double(kernels_ptx):
    """fp64 inputs are computed in fp64 (gradcheck needs it), not narrowed to fp32: the double
    instantiations convert nothing to f32 and use exp, not the fp32 fast ex2.approx of __expf
    (also under setup.py's --use_fast_math)."""
    for name, body in instantiations(kernels_ptx, "d", 1).items():
        assert "cvt.rn.f32.f64" not in body, f"{name} narrows fp64 to fp32"
        assert "ex2.approx" not in body, f"{name} uses the fp32 fast exp"
    for body in instantiations(kernels_ptx, "f", 1).values():  # fp32 keeps the fast exp
        assert "ex2.approx" in body


def global_accesses(body: str) -> collections.Counter:
    return collections.Counter(re.findall(r"\b((?:ld|st)\.global(?:\.nc)?(?:\.v2)?\.\w+)", body))


@pytest.mark.heavy
@pytest.mark.parametrize("type_code", ["6__half", "13__nv_bfloat16"])
def test_packed_16_bit_kernels_move_4_bytes_an_access(kernels_ptx, type_code):
    """With two columns per thread, every access to x1, c, grad_c and grad_x1 is one 4-byte
    vector access (v2.u16): the only 2-byte loads left are alpha and beta of the two columns,
    and no 2-byte store is left; the one-column kernels make 2-byte accesses."""
    for name, body in instantiations(kernels_ptx, type_code, 2).items():
        accesses = global_accesses(body)
        assert accesses["ld.global.nc.u16"] == 4, (name, accesses)  # alpha, beta: 2 columns
        assert accesses["ld.global.nc.v2.u16"] >= 16 and accesses["st.global.v2.u16"] >= 16, (
            name, accesses)
        assert accesses["st.global.u16"] == 0, (name, accesses)
    for name, body in instantiations(kernels_ptx, type_code, 1).items():
        accesses = global_accesses(body)
        assert accesses["ld.global.nc.v2.u16"] == 0 and accesses["st.global.u16"] >= 16, (
            name, accesses)
