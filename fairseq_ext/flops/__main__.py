"""``python -m fairseq_ext.flops``: the FLOPs calculator (:mod:`fairseq_ext.flops.cli`)."""
import sys

from fairseq_ext.flops.cli import main

sys.exit(main())
