"""Reusable layers and tensor utilities shared by the model families: token packing and the
packed encoder layer (3ML), ``PositionedTransformerEncoder``, the SwishRNN layer, T5 relative
attention bias, the bidirectional attention masks and their FlexAttention block masks.
May import: ops, cli.
"""
