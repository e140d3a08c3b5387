"""Each paper's studies, one module per paper: declarations only (data, checked at import by
:func:`~fairseq_ext_lab.studies.spec.register_study`).

May import: see :mod:`fairseq_ext_lab`.
"""
# The order of registration is the order of STUDIES (the command line lists them so).
# isort: off
from fairseq_ext_lab.studies.catalog import three_ml, swishrnn, bidirectional  # noqa: F401
# isort: on
