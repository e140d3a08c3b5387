"""The CUDA kernels of fairseq_ext::swish_recurrence compile with nvcc, also on a CPU machine.

``swish_recurrence_kernels.cu`` includes no torch header (the CPU torch wheel lacks the CUDA
ones), so CI can compile-check it wherever a CUDA toolkit is installed; running the kernels
needs a GPU (``tests/test_swish_rnn.py`` runs the op on every device that has a kernel).
"""
import re
import shutil
import subprocess

import pytest

from conftest import REPO_ROOT

KERNELS = REPO_ROOT / "fairseq_ext" / "csrc" / "swish_recurrence_kernels.cu"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no CUDA toolkit (nvcc) on this machine")
def test_cuda_kernels_compile_with_nvcc(tmp_path):
    proc = subprocess.run(
        ["nvcc", "-c", "-std=c++17", "-O3", "-arch=sm_90", str(KERNELS),
         "-o", str(tmp_path / "kernels.o")],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    symbols = subprocess.run(["nm", "-C", str(tmp_path / "kernels.o")], capture_output=True,
                             text=True).stdout
    for suffix in ("f32", "f64", "f16", "bf16"):  # the launchers the torch binding calls
        assert f"launch_swish_recurrence_forward_{suffix}" in symbols
        assert f"launch_swish_recurrence_backward_{suffix}" in symbols


def ptx_entries(ptx: str) -> dict:
    """{mangled kernel name: its PTX body} of a .ptx file."""
    parts = re.split(r"(?m)^\.(?:visible )?\.?entry ", ptx)
    return {part.split("(", 1)[0]: part for part in parts[1:]}


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no CUDA toolkit (nvcc) on this machine")
def test_fp64_kernels_compute_in_double(tmp_path):
    """fp64 inputs are computed in fp64 (gradcheck needs it), not narrowed to fp32: the double
    instantiations convert nothing to f32 and use exp, not the fp32 fast ex2.approx of __expf,
    and the backward's alpha/beta partial sums are double (the launcher's signature)."""
    ptx = tmp_path / "kernels.ptx"
    proc = subprocess.run(["nvcc", "-ptx", "-std=c++17", "-O3", "-arch=sm_90", str(KERNELS),
                           "-o", str(ptx)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    entries = ptx_entries(ptx.read_text())
    double = {name: body for name, body in entries.items() if "_kernelIdE" in name}
    single = {name: body for name, body in entries.items() if "_kernelIfE" in name}
    assert len(double) == 2 and len(single) == 2  # forward and backward of each
    for name, body in double.items():
        assert "cvt.rn.f32.f64" not in body, f"{name} narrows fp64 to fp32"
        assert "ex2.approx" not in body, f"{name} uses the fp32 fast exp"
    for body in single.values():  # the fp32 kernels keep the fast exp
        assert "ex2.approx" in body
    subprocess.run(["nvcc", "-c", "-std=c++17", "-O3", "-arch=sm_90", str(KERNELS), "-o",
                    str(tmp_path / "kernels.o")], check=True, capture_output=True, timeout=600)
    symbols = subprocess.run(["nm", "-C", str(tmp_path / "kernels.o")], capture_output=True,
                             text=True).stdout
    assert ("launch_swish_recurrence_backward_f64(double const*, double const*, double const*, "
            "double const*, double const*, double*, double*, double*") in symbols
