"""Criteria registered with fairseq's ``--criterion``: ``masked_lm_categories`` (3ML and any
masked LM: loss per corruption category, [MASK] / replaced / unchanged), ``masked_lm_flops``
(the same with the analytic training FLOPs of each update logged, 3ML paper App. D) and
``bidirectional_lm`` (Artetxe et al.: losses of the masked and the next-token predictions, with
their accuracies). May import: models, data, flops, reporting, cli.
"""
from fairseq_ext.criterions import (  # noqa: F401
    bidirectional_lm,
    masked_lm_categories,
    masked_lm_flops,
)
