"""fairseq-ext: a fairseq ``--user-dir`` plugin (3ML, generalized bidirectionality, SwishRNN,
FLOP-counting criteria).

Install with ``make install`` (creates ``.venv``), or by hand::

    pip install torch==2.13.0
    pip install --no-deps -r requirements-fairseq.txt
    pip install -r requirements.txt -c constraints.txt
    pip install --no-deps --no-build-isolation -e .
"""
from setuptools import find_packages, setup

setup(
    name="fairseq-ext",
    version="0.1.0",
    description="fairseq plugin: 3ML, generalized bidirectionality, SwishRNN, FLOP counting",
    python_requires=">=3.11",
    packages=find_packages(include=["fairseq_ext", "fairseq_ext.*"]),
    # Dependencies are pinned in requirements*.txt and installed by `make install`; fairseq must
    # be installed with --no-deps (see requirements-fairseq.txt), so nothing is declared here.
    install_requires=[],
    entry_points={
        "console_scripts": [
            "fairseq-ext-prepare-corpus = fairseq_ext.data.prepare_corpus:main",
        ]
    },
)
