"""``python -m fairseq_ext_lab.studies``: :func:`~fairseq_ext_lab.studies.cli.main`."""
from fairseq_ext_lab.studies.cli import main

if __name__ == "__main__":
    main()
