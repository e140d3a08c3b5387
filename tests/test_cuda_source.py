"""The CUDA kernels of fairseq_ext::swish_recurrence compile with nvcc, also on a CPU machine.

``swish_recurrence_kernels.cu`` includes no torch header (the CPU torch wheel lacks the CUDA
ones), so CI can compile-check it wherever a CUDA toolkit is installed; running the kernels
needs a GPU (``tests/test_swish_rnn.py`` runs the op on every device that has a kernel).
"""
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
