"""Tasks registered with fairseq's ``--task``, one module each, imported here so that
``--user-dir fairseq_ext`` registers them. (3ML, SwishRNN-BERT and the FLOP-counting criteria
use fairseq's own ``masked_lm`` task; the tasks of the coming systems live here.)"""
