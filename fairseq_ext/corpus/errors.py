"""The error type of the corpus pipeline."""


class CorpusError(Exception):
    """A problem the user can fix (bad input, conflicting destdir...): the CLI prints the
    message on one line and exits with status 2, without a traceback."""
