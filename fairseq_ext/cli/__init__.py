"""fairseq-ext at the command line: the errors our checks raise and how fairseq's command-line
tools print them (:mod:`fairseq_ext.cli.errors`).

May import: nothing of fairseq_ext (every layer uses it).
"""
