"""The control every pre-training claim needs: the same architecture at random initialisation.

``python -m fairseq_ext.export.random_init CKPT OUT.pt --seed S`` writes a checkpoint that is
``CKPT`` in every respect (its ``cfg``: arch, sizes, normalisation, task and data) except its
weights, drawn afresh by the model's own initialisation as ``fairseq-train`` draws them at
update 0 with ``--seed S``, and with no training state, so every route that fine-tunes ``CKPT``
fine-tunes the random control the same way: what pre-training buys is the difference. The model
is rebuilt through fairseq (``load_model_ensemble_and_task``, then ``task.build_model`` under
the seed), and nothing is written unless the new weights have exactly ``CKPT``'s names and
shapes. ``OUT`` is written atomically and never over an existing file unless ``--force``. Usage
(3ML through its exported encoder): docs/transfer.md, "The control".
"""
import argparse
import logging
from pathlib import Path
from typing import Dict

from fairseq_ext.export.checkpoints import (
    ExportError,
    load_checkpoint,
    plain_config,
    run_export_command,
)
from fairseq_ext.training.output_files import atomic_file, refuse_existing

logger = logging.getLogger(__name__)


def fresh_weights(checkpoint: Path, seed: int) -> Dict[str, "object"]:
    """The state dict of ``checkpoint``'s architecture built afresh under ``seed`` (the model's
    own initialisation; the RNG state of the caller is left as it was)."""
    import torch
    from fairseq import checkpoint_utils

    from fairseq_ext.training.checkpoint_loading import allow_fairseq_checkpoint_globals

    allow_fairseq_checkpoint_globals()
    with torch.random.fork_rng(devices=[]):  # loading builds (and initialises) a model too
        try:
            models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)])
        except (FileNotFoundError, OSError) as error:
            raise ExportError(f"{checkpoint}: its model cannot be rebuilt ({error}); its "
                              "task's data (cfg.task.data, for the dictionary) must be on this "
                              "machine")
        trained = models[0].state_dict()
        torch.manual_seed(seed)
        fresh = task.build_model(cfg.model).state_dict()
    if set(fresh) != set(trained) or any(fresh[k].shape != trained[k].shape for k in fresh):
        differ = sorted(set(fresh) ^ set(trained)) or sorted(
            k for k in fresh if fresh[k].shape != trained[k].shape)
        raise ExportError(f"{checkpoint}: a fresh build of its arch does not have its weights "
                          f"({', '.join(differ[:4])}...); it cannot be controlled this way")
    return {key: value.detach().clone() for key, value in fresh.items()}


def random_init_state(checkpoint: Path, seed: int) -> dict:
    """``checkpoint``'s dict with fresh weights (:func:`fresh_weights`) and no training state:
    0 updates, epoch 1 not started, no optimizer, criterion or meters."""
    from fairseq_ext.export.encoder import fresh_run_state

    state = load_checkpoint(checkpoint)
    weights = fresh_weights(checkpoint, seed)
    last = (state.get("optimizer_history") or [{}])[-1]
    return fresh_run_state(plain_config(state["cfg"]), weights, last, {
        "random_init_of": str(checkpoint.resolve()), "seed": seed,
        "source_num_updates": int(last.get("num_updates", 0) or 0)})


def write_random_init(checkpoint: Path, out: Path, seed: int, force: bool = False) -> None:
    import torch

    refuse_existing([out], force)
    state = random_init_state(checkpoint, seed)
    with atomic_file(out, force=force, binary=True) as handle:
        torch.save(state, handle)
    logger.info("%s: %s's architecture at random initialisation (seed %d)", out, checkpoint,
                seed)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fairseq_ext.export.random_init",
        description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", type=Path, help="a fine-tunable checkpoint (a 3ML "
                        "checkpoint: export its encoder first)")
    parser.add_argument("out", type=Path, help="the random-init checkpoint to write")
    parser.add_argument("--seed", type=int, default=1, help="the draw (default 1)")
    parser.add_argument("--force", action="store_true", help="overwrite OUT")
    args = parser.parse_args(argv)

    def body() -> int:
        write_random_init(args.checkpoint, args.out, args.seed, args.force)
        return 0

    return run_export_command("random_init", logger, body)


if __name__ == "__main__":
    raise SystemExit(main())
