"""fairseq's own training update outside ``fairseq-train``: :class:`TrainerStep` builds
fairseq's :class:`fairseq.trainer.Trainer` from a ``fairseq-train`` command line (task, model,
criterion, optimizer, lr scheduler, gradient clipping, logging reduction: all of
``Trainer.train_step``) and takes the first batches of its training iterator; :meth:`step` is
one ``Trainer.train_step``. What times it is ``scripts/bench_step.py``
(:mod:`fairseq_ext_lab.benchmarks.trainer_step_timing`); tests drive it update by update. It
needs fairseq's APIs only (the arch, task and criterion come registered through ``--user-dir``)."""
from typing import Any, Dict, Sequence, Tuple

import torch


class TrainerStep:
    """fairseq's ``Trainer`` built from ``fairseq-train`` flags, and the first ``batches``
    batches of its training iterator (in fairseq's order of sizes, or shuffled as
    fairseq-train's first epoch); :meth:`step` is one ``Trainer.train_step`` on the next of
    them, round and round. ``bf16`` trains in bfloat16 as ``fairseq-hydra-train ...
    common.bf16=true`` does."""

    def __init__(self, argv: Sequence[str], batches: int = 8, shuffle: bool = False,
                 bf16: bool = False):
        from fairseq import options, tasks, utils
        from fairseq.dataclass.utils import convert_namespace_to_omegaconf
        from fairseq.trainer import Trainer

        parser = options.get_training_parser()
        args = options.parse_args_and_arch(parser, list(argv))
        cfg = convert_namespace_to_omegaconf(args)
        if bf16:  # as fairseq-hydra-train's common.bf16=true (fairseq-train's --bf16 is TPU's)
            cfg.common.bf16 = True
        utils.import_user_module(cfg.common)
        torch.manual_seed(cfg.common.seed)
        self.cfg = cfg
        self.task = tasks.setup_task(cfg.task)
        self.task.load_dataset("train")
        model = self.task.build_model(cfg.model)
        criterion = self.task.build_criterion(cfg.criterion)
        self.trainer = Trainer(cfg, self.task, model, criterion)
        iterator = self.trainer.get_train_iterator(epoch=1).next_epoch_itr(shuffle=shuffle)
        self.samples = [next(iterator) for _ in range(batches)]
        #: updates made so far (the next batch is ``samples[updates % len(samples)]``)
        self.updates = 0

    def step(self) -> Tuple[Dict[str, Any], Any]:
        """One ``Trainer.train_step`` on the next batch: returns the batch and what
        ``train_step`` returned (its logging output)."""
        sample = self.samples[self.updates % len(self.samples)]
        self.updates += 1
        return sample, self.trainer.train_step([sample])

    def update(self) -> None:
        """:meth:`step`, its results dropped (what a timer calls)."""
        self.step()
