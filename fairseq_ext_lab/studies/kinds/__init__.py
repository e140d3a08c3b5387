"""One module per kind of evaluation (masked LM, bidirectional LM), each a
:class:`~fairseq_ext_lab.studies.kinds.base.Kind`, registered in :data:`KINDS` by its
name (:attr:`Study.kind <fairseq_ext_lab.studies.spec.Study.kind>`).

May import: see :mod:`fairseq_ext_lab`.
"""
from typing import Dict

from fairseq_ext_lab.studies.kinds import bidirectional, masked_lm
from fairseq_ext_lab.studies.kinds.base import Kind

KINDS: Dict[str, Kind] = {kind.name: kind for kind in (masked_lm.KIND, bidirectional.KIND)}


def kind_of(study) -> Kind:
    """The :class:`Kind` of ``study``."""
    return KINDS[study.kind]
