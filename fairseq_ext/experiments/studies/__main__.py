"""``python -m fairseq_ext.experiments.studies``: :func:`~fairseq_ext.experiments.studies.cli.main`."""
from fairseq_ext.experiments.studies.cli import main

if __name__ == "__main__":
    main()
