"""fairseq-ext: a fairseq ``--user-dir`` plugin (3ML, SwishRNN-BERT, FLOP-counting criteria;
generalized bidirectionality is not built yet: README, "Status").

Install with ``make install`` (creates ``.venv``), or by hand::

    pip install torch==2.13.0
    pip install --no-deps -r requirements-fairseq.txt
    pip install -r requirements.txt -c constraints.txt
    pip install --no-deps --no-build-isolation -e .
"""
import os
import platform

import torch
from setuptools import find_packages, setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension


class OptionalBuildExtension(BuildExtension):
    """torch's BuildExtension, but an ``optional`` extension that fails to compile (torch raises
    RuntimeError, which setuptools' own ``optional`` handling does not catch) only warns; and
    the sources named in :data:`SOURCE_FLAGS` get their own extra C++ flags (so it compiles one
    source at a time: ninja would give every source the same flags)."""

    def build_extension(self, ext):
        compile_one = self.compiler._compile

        def compile_with_source_flags(obj, src, ext_, cc_args, extra_postargs, pp_opts):
            flags = SOURCE_FLAGS.get(os.path.basename(src), [])
            if flags and isinstance(extra_postargs, dict):
                extra_postargs = dict(extra_postargs, cxx=extra_postargs.get("cxx", []) + flags)
            elif flags:
                extra_postargs = list(extra_postargs) + flags
            return compile_one(obj, src, ext_, cc_args, extra_postargs, pp_opts)

        self.compiler._compile = compile_with_source_flags
        try:
            super().build_extension(ext)
        except Exception as error:
            if not getattr(ext, "optional", False):
                raise
            self.warn(f"could not build {ext.name}: {error}; fairseq_ext will log that it uses "
                      "the pure-PyTorch reference instead")
        finally:
            self.compiler._compile = compile_one


# The SwishRNN recurrence op (fairseq_ext::swish_recurrence): CPU kernels always, CUDA kernels
# when torch is a CUDA build and a CUDA toolkit is found. Optional: if it cannot be compiled,
# installation goes on and fairseq_ext.modules.swish_rnn logs that it runs the pure-PyTorch
# reference instead.
# The fp32 CPU kernels (swish_recurrence_cpu_vec.h) are compiled portable and, on x86-64, for
# AVX2+FMA and for AVX-512; the widest the CPU runs is chosen at run time, so the build runs
# on any x86-64.
CPU_SOURCES = ["fairseq_ext/ops/csrc/swish_recurrence.cpp",
               "fairseq_ext/ops/csrc/swish_recurrence_cpu_default.cpp",
               "fairseq_ext/ops/csrc/swish_recurrence_cpu_avx2.cpp",
               "fairseq_ext/ops/csrc/swish_recurrence_cpu_avx512.cpp"]
SOURCE_FLAGS = {}
if platform.machine().lower() in ("x86_64", "amd64"):
    SOURCE_FLAGS["swish_recurrence_cpu_avx2.cpp"] = [
        "-mavx2", "-mfma", "-DCPU_CAPABILITY=AVX2", "-DCPU_CAPABILITY_AVX2"]
    SOURCE_FLAGS["swish_recurrence_cpu_avx512.cpp"] = [
        "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma",
        "-DCPU_CAPABILITY=AVX512", "-DCPU_CAPABILITY_AVX512"]
CUDA_SOURCES = ["fairseq_ext/ops/csrc/swish_recurrence_cuda.cpp",
                "fairseq_ext/ops/csrc/swish_recurrence_kernels.cu"]
COMPILE_ARGS = {"cxx": ["-O3", "-fopenmp"], "nvcc": ["-O3", "--use_fast_math"]}
# The GPU architectures the CUDA kernels are compiled for, in torch's TORCH_CUDA_ARCH_LIST syntax
# (a TORCH_CUDA_ARCH_LIST set by the user wins): machine code for Ampere (A100, A10/RTX 30),
# Ada (L4/L40/RTX 40) and Hopper (H100/H200), and Hopper PTX that newer GPUs compile at load
# time. Without it torch would build for the GPUs visible at build time, or for every
# architecture of its CUDA build where none is. tests/test_cuda_source.py compiles the kernels
# for this list with nvcc (from requirements-nvcc.txt) in every `make test`.
CUDA_ARCH_LIST = "8.0;8.6;8.9;9.0+PTX"
if torch.version.cuda is not None and CUDA_HOME is not None:
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", CUDA_ARCH_LIST)
    native_ops = CUDAExtension("fairseq_ext.ops._C", CPU_SOURCES + CUDA_SOURCES,
                               extra_compile_args=COMPILE_ARGS, extra_link_args=["-fopenmp"],
                               optional=True)
else:
    native_ops = CppExtension("fairseq_ext.ops._C", CPU_SOURCES,
                              extra_compile_args={"cxx": COMPILE_ARGS["cxx"]},
                              extra_link_args=["-fopenmp"], optional=True)

# FAIRSEQ_EXT_NATIVE=0 installs without compiling the op (no compiler needed; the pure-PyTorch
# reference runs, as when the compile fails).
if os.environ.get("FAIRSEQ_EXT_NATIVE", "1") == "0":
    native_ops = None

setup(
    name="fairseq-ext",
    version="0.1.0",
    description="fairseq plugin: 3ML (Mask More and Mask Later), SwishRNN-BERT and "
                "FLOP-counting criteria",
    python_requires=">=3.11",
    # The plugin (fairseq_ext, what --user-dir loads) and the lab that measures it (fairseq_ext_lab).
    packages=find_packages(include=["fairseq_ext", "fairseq_ext.*",
                                    "fairseq_ext_lab", "fairseq_ext_lab.*"]),
    # Dependencies are pinned in requirements*.txt and installed by `make install`; fairseq must
    # be installed with --no-deps (see requirements-fairseq.txt), so nothing is declared here.
    install_requires=[],
    # The Hugging Face export (scripts/export_hf.py), left out of the core install; the same pin
    # as requirements-hf.txt.
    extras_require={"hf": ["transformers==5.23.0"], "sharding": ["fairscale==0.4.13"]},
    ext_modules=[native_ops] if native_ops is not None else [],
    cmdclass={"build_ext": OptionalBuildExtension.with_options(use_ninja=False)},
    entry_points={
        "console_scripts": [
            "fairseq-ext-prepare-corpus = fairseq_ext.corpus.prepare_corpus:main",
        ]
    },
)
