"""Models and architectures, one module per family with its architectures registered at the
bottom (as fairseq's ``examples/linformer``): ``three_ml`` (3ML self/cross), ``bert_rab`` and
``swishrnn_bert`` (SwishRNN paper), ``bidirectional_lm`` (Artetxe et al.), ``roberta_sizes``
(RoBERTa baselines at our sizes), ``roberta_pooled`` (RoBERTa whose classification heads
pool ``<s>`` or the mean of the tokens); ``sizes`` is the one table of sizes, ``validation`` the config
checks every registered arch runs when it is read. May import: modules, data, cli.
"""
from fairseq_ext.models import (  # noqa: F401
    bert_rab,
    bidirectional_lm,
    roberta_pooled,
    roberta_sizes,
    swishrnn_bert,
    three_ml,
)
