"""Run plumbing every layer above uses: fairseq checkpoints loading on torch >= 2.6 with
weights-only unpickling kept on (:mod:`.checkpoint_loading`), outputs written atomically and
never over what the user saved without ``--force`` (:mod:`.output_files`), an arch built outside
fairseq-train (:mod:`.model_building`), the apex / torch fused-kernel choice
(:mod:`.fused_kernels`), the ``${fairseq_ext.user_dir:}`` resolver the hydra YAMLs register
(:mod:`.hydra_config`) and where fairseq's console scripts are (``FAIRSEQ_BIN``,
:mod:`.fairseq_bin`), and fairseq's own ``Trainer`` built from ``fairseq-train`` flags, one
``train_step`` at a time (:mod:`.trainer_harness`). The memory plan, which needs the FLOP
formulas' parameter counts, is :mod:`fairseq_ext.flops.memory_plan`.

May import: cli.
"""
