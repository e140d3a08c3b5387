"""``python -m fairseq_ext_lab.benchmarks.cli_update_timing FLAGS``: an epoch's batch shapes for a
fairseq-train command line, counted without training (the shapes docs/training_step.md lists
for the recipes), and the buckets ``--torch-compile`` chooses in them."""
from fairseq_ext_lab.benchmarks.cli_update_timing import epoch_batch_shapes


def test_torch_compile_pads_the_same_batches_to_its_buckets(tiny_data_bin):
    argv = [str(tiny_data_bin), "--task", "masked_lm", "--arch", "roberta_tiny", "--criterion",
            "masked_lm", "--tokens-per-sample", "32", "--sample-break-mode", "eos",
            "--batch-size", "4", "--skip-invalid-size-inputs-valid-test", "--cpu"]
    eager = epoch_batch_shapes(argv)
    compiled = epoch_batch_shapes(argv + ["--torch-compile"])
    for split in ("train", "valid"):
        lengths = {t for _, t in eager[split]}
        assert any(t % 8 for t in lengths)  # eos rows: lengths of their own
        assert {t for _, t in compiled[split]} <= {8, 16, 24, 32}
        assert len(compiled[split]) < len(eager[split])

        def rows(counts):  # the same batches: rows per batch, with their counts
            out = {}
            for (batch, _), n in counts.items():
                out[batch] = out.get(batch, 0) + n
            return out

        assert rows(compiled[split]) == rows(eager[split])
        # each eager batch lands in the bucket of its length, rounded up to 8
        bucketed = {}
        for (batch, length), n in eager[split].items():
            key = (batch, -(-length // 8) * 8)
            bucketed[key] = bucketed.get(key, 0) + n
        assert bucketed == compiled[split]
