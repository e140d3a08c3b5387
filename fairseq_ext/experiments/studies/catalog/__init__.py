"""Each paper's studies, one module per paper: declarations only (data, checked at import by
:func:`~fairseq_ext.experiments.studies.spec.register_study`).

May import: see :mod:`fairseq_ext.experiments`.
"""
# The order of registration is the order of STUDIES (the command line lists them so).
# isort: off
from fairseq_ext.experiments.studies.catalog import three_ml, swishrnn, bidirectional  # noqa: F401
# isort: on
