"""Tasks registered with fairseq's ``--task``, one module each, imported here so that
``--user-dir fairseq_ext`` registers them. (3ML, SwishRNN-BERT and the FLOP-counting criteria
use fairseq's own ``masked_lm`` task; the tasks of the coming systems live here.)

* ``bidirectional_lm`` (:mod:`fairseq_ext.tasks.bidirectional_lm`): generalized bidirectionality
  (Artetxe et al. 2022), the six variants of its Table 1.

May import: criterions, data, reporting, cli.
"""
from fairseq_ext.tasks import bidirectional_lm  # noqa: F401  (registers bidirectional_lm)
