"""Sequence scoring of ``bidirectional_lm`` checkpoints (Table 6's full-sequence infilling,
Tables 7-8's zero-shot multiple choice) against hand computations on tiny models.

Checkpoints are written in-process (a randomly initialised ``bidir_lm_tiny`` with the config
``fairseq-train`` would save), so the fast tests load real checkpoint files through the scripts'
own loader; one slow test trains with ``fairseq-train`` and checks that the proposer's direct
accuracy and the documents scored are ``fairseq-validate --eval-mode infill``'s.

1. full-sequence log-likelihood = per-token log_softmax sums computed here, one sequence at a
   time, whatever the batching;
2. Table 6: the proposals (positions of ``--eval-mode infill``, top-K over the non-special
   vocabulary from a hand-built layout), the upper bound and direct accuracy, the batched
   candidate scores = each candidate scored alone = the hand sums, the chosen answer = the argmax
   of the hand scores, skipped documents counted, candidate files (round trip, ``--top-k``
   shrinking, the dictionary-fingerprint error);
3. Tables 7-8: the tokens (the data-bin's sentencepiece model), each normalisation by hand, infill
   logits = the model's logits at a hand-built ``<mask>`` layout, ``--template`` = the
   prefix/suffix rows, and the errors (multi-token verbalizer, a checkpoint that cannot serve
   the mode, malformed rows).
"""
import json
import math
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import sentencepiece
import torch
from fairseq import options, tasks
from fairseq.data import Dictionary
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from omegaconf import OmegaConf
from test_bidirectional_lm_data import reference_documents, with_empty_lines, write_data_bin

import fairseq_ext
from conftest import REPO_ROOT, USER_DIR, fairseq_cli, json_log_records, python_cli, run_cli
from fairseq_ext.corpus.encoders import train_sentencepiece, write_sentencepiece_dictionary
from fairseq_ext_lab.evaluation import infill_rescore, multiple_choice, sequence_scoring
from fairseq_ext_lab.evaluation.sequence_scoring import (
    ScoringError,
    dictionary_fingerprint,
    infill_logits,
    load_scoring_model,
    sequence_log_likelihoods,
    token_log_probs,
)

DATA_DIR = Path(__file__).resolve().parent / "data"
BOS, PAD, EOS, UNK = 0, 1, 2, 3
N_WORDS = 40
TOKENS_PER_SAMPLE = 64


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


def word_dictionary(reverse=False) -> Dictionary:
    """w0..w39 (reversed: w39..w0) padded to a multiple of 8 with madeupwords, as
    fairseq-preprocess writes it."""
    dictionary = Dictionary()
    for i in (reversed(range(N_WORDS)) if reverse else range(N_WORDS)):
        dictionary.add_symbol(f"w{i}")
    dictionary.pad_to_multiple_(8)
    return dictionary


DICTIONARY = word_dictionary()
W = [DICTIONARY.index(f"w{i}") for i in range(N_WORDS)]
MASK = len(DICTIONARY)
SPECIALS = sorted({BOS, PAD, EOS, UNK, MASK} | {i for i, s in enumerate(DICTIONARY.symbols)
                                              if s.startswith("madeupword")})


def write_checkpoint(data: Path, variant: str, path: Path, seed: int = 0,
                     document_format: str = "lines") -> Path:
    """A randomly initialised bidir_lm_tiny checkpoint of ``--variant``, with the config
    fairseq-train saves for ``fairseq-train DATA --task bidirectional_lm --variant V
    --document-format F`` (default ``lines``: the word data-bins below hold one document per
    line, with lines that exercise the edge cases)."""
    parser = options.get_training_parser(default_task="bidirectional_lm")
    args = options.parse_args_and_arch(parser, input_args=[
        str(data), "--task", "bidirectional_lm", "--arch", "bidir_lm_tiny",
        "--criterion", "bidirectional_lm", "--user-dir", fairseq_ext.__path__[0],
        "--variant", variant, "--tokens-per-sample", str(TOKENS_PER_SAMPLE), "--seed", "1",
        "--document-format", document_format])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    torch.manual_seed(seed)
    model = task.build_model(cfg.model)
    torch.save({"args": None, "cfg": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
                "model": model.state_dict(), "extra_state": {"train_iterator": {"epoch": 1}},
                "optimizer_history": [{"criterion_name": "BidirectionalLmLoss",
                                       "optimizer_name": "FairseqAdam",
                                       "lr_scheduler_state": {"best": None}, "num_updates": 0}]},
               path)
    return path


def random_documents(rng, count, low, high):
    """``count`` documents of ``low..high`` tokens ending in ``</s>``, w0 about 40% of the words
    (so a proposer's top-K often holds the answer)."""
    documents = []
    for n in rng.integers(low, high + 1, size=count):
        words = np.where(rng.random(n - 1) < 0.4, W[0], rng.choice(W, n - 1))
        documents.append([int(t) for t in words] + [EOS])
    return documents


@pytest.fixture(scope="module")
def word_setup(tmp_path_factory):
    """A data-bin whose valid split has ordinary documents, ``</s>`` alone and ``<unk> </s>``
    (no maskable token), a lone word without ``</s>`` (too short for full-sequence scoring), and
    a line longer than --tokens-per-sample (two documents); a second data-bin with the same
    text under a reordered dictionary; checkpoints of several variants on each."""
    root = tmp_path_factory.mktemp("scoring")
    rng = np.random.default_rng(5)
    lines = (random_documents(rng, 9, 2, 20) + [[EOS], [UNK, EOS], [W[5]]]
             + random_documents(rng, 1, 90, 90) + random_documents(rng, 3, 3, 8))
    data = write_data_bin(root / "bin", {"valid": lines}, word_dictionary())
    other = write_data_bin(root / "other", {"valid": lines}, word_dictionary(reverse=True))
    checkpoints = {variant: write_checkpoint(data, variant, root / f"{variant}.pt", seed)
                   for seed, variant in enumerate(("msk_bi", "nxt_uni", "hyb_uni"))}
    checkpoints["other_nxt_uni"] = write_checkpoint(other, "nxt_uni", root / "other.pt", 7)
    documents = []
    for line in lines:  # the long line becomes two pieces of 45 (split_lengths)
        documents += [line[:45], line[45:]] if len(line) > TOKENS_PER_SAMPLE else [line]
    return {"root": root, "data": data, "other": other, "checkpoints": checkpoints,
            "documents": documents}


# --- hand computations ---------------------------------------------------------------------------

def hand_log_probs(model, tokens, positions=None, n_bidir=None):
    """float64 log-probabilities ``(n, V)`` of one sequence run on its own: the model's causal
    default (no layout), or ``positions`` / ``bidir_lens = n_bidir`` given by hand."""
    with torch.no_grad():
        if positions is None:
            logits = model(torch.tensor([tokens]))[0][0]
        else:
            n = len(tokens)
            logits = model(torch.tensor([tokens]), src_positions=torch.tensor([positions]),
                           doc_ids=torch.zeros(1, n, dtype=torch.long),
                           bidir_lens=torch.full((1, n), n_bidir))[0][0]
    return torch.log_softmax(logits.double(), dim=-1)


def hand_log_likelihood(model, tokens) -> float:
    lp = hand_log_probs(model, list(tokens))
    return sum(float(lp[t, tokens[t + 1]]) for t in range(len(tokens) - 1))


def half_up(ratio, n) -> int:
    return math.floor(Fraction(str(ratio)) * n + Fraction(1, 2))


def hand_infill_logits(model, tokens, position, r_bidir, mask=MASK):
    """Logits at the ``<mask>`` (id ``mask``) of ``tokens`` with ``position`` masked and moved to
    the end."""
    n = len(tokens)
    kept = [q for q in range(n) if q != position]
    with torch.no_grad():
        logits = model(torch.tensor([[tokens[q] for q in kept] + [mask]]),
                       src_positions=torch.tensor([kept + [position]]),
                       doc_ids=torch.zeros(1, n, dtype=torch.long),
                       bidir_lens=torch.full((1, n), half_up(r_bidir, n)))[0][0]
    return logits[-1].double()


def spec_positions(tokens, document, eval_seed, count=1):
    """``--eval-mode infill``'s rule: ``count`` non-special positions drawn one after the other
    without replacement from ``default_rng((eval seed, document))``."""
    candidates = [p for p, t in enumerate(tokens) if t not in SPECIALS]
    rng = np.random.default_rng((eval_seed, document))
    return [candidates.pop(int(rng.integers(len(candidates))))
            for _ in range(min(count, len(candidates)))]


def hand_proposals(model, documents, top_k, r_bidir, eval_seed, positions=1):
    rows, no_token, short = [], 0, 0
    for document, tokens in enumerate(documents):
        drawn = spec_positions(tokens, document, eval_seed, positions)
        if not drawn:
            no_token += 1
            continue
        if len(tokens) < 2:
            short += 1
            continue
        for position in drawn:
            logits = hand_infill_logits(model, tokens, position, r_bidir)
            words = logits.clone()
            words[SPECIALS] = -math.inf
            candidates = torch.topk(words, top_k).indices.tolist()
            log_probs = torch.log_softmax(logits, dim=-1)[candidates].tolist()
            rows.append({"document": document, "position": position, "answer": tokens[position],
                         "candidates": candidates, "log_probs": log_probs})
    return rows, no_token, short


def rescore_args(data, *flags):
    return infill_rescore.build_parser().parse_args([str(data), "--cpu", *map(str, flags)])


# --- 1. full-sequence log-likelihood -------------------------------------------------------------

@pytest.mark.parametrize("logit_rows", [None, 7])  # 7: output chunks that cut across sequences
def test_full_sequence_log_likelihood_by_hand(word_setup, logit_rows, monkeypatch):
    if logit_rows is not None:
        monkeypatch.setattr(sequence_scoring, "LOGIT_ROWS_PER_CHUNK", logit_rows)
    scoring = load_scoring_model(word_setup["checkpoints"]["nxt_uni"], word_setup["data"])
    model = scoring.model
    rng = np.random.default_rng(3)
    sequences = [[W[3]], [W[1], EOS]] + random_documents(rng, 6, 3, 30)
    hand = [[float(hand_log_probs(model, seq)[t, seq[t + 1]]) for t in range(len(seq) - 1)]
            for seq in sequences]
    for batch_size in (None, 1, 3):
        got = token_log_probs(scoring, sequences, batch_size=batch_size)
        assert [len(lp) for lp in got] == [len(seq) - 1 for seq in sequences]
        for lp, expected in zip(got, hand):
            np.testing.assert_allclose(lp, expected, rtol=1e-5, atol=1e-5)
    sums = sequence_log_likelihoods(scoring, sequences, batch_size=2)
    assert sums[0] == 0.0  # a lone first token has no next-token term
    assert sums == pytest.approx([sum(h) for h in hand], rel=1e-5, abs=1e-5)


def test_sequences_longer_than_the_model_are_refused(word_setup):
    scoring = load_scoring_model(word_setup["checkpoints"]["nxt_uni"], word_setup["data"])
    with pytest.raises(ScoringError, match="more than the 64 positions"):
        sequence_log_likelihoods(scoring, [[W[1]] * 65])


# --- 2. Table 6 ----------------------------------------------------------------------------------

@pytest.mark.parametrize("r_bidir, eval_seed, top_k, positions",
                         [("1", 1, 8, 1), ("0.5", 4, 20, 1), ("1", 1, 8, 3)])
def test_proposals_top_k_and_upper_bound_by_hand(word_setup, r_bidir, eval_seed, top_k, positions):
    proposer = load_scoring_model(word_setup["checkpoints"]["msk_bi"], word_setup["data"],
                                  "--proposer")
    proposals, _ = infill_rescore.make_proposals(proposer, word_setup["data"], "valid", r_bidir,
                                                 eval_seed, top_k, batch_size=4,
                                                 infill_positions=positions)
    hand, no_token, short = hand_proposals(proposer.model, word_setup["documents"], top_k,
                                           r_bidir, eval_seed, positions)
    assert (no_token, short) == (2, 1)
    header = proposals.header
    assert (header["skipped_no_maskable_token"], header["skipped_too_short"]) == (no_token, short)
    assert header["documents"] == len(word_setup["documents"]) - 3
    assert header["positions"] == len(hand) == len(proposals.proposals)
    assert len(hand) > header["documents"] if positions > 1 else len(hand) == header["documents"]
    for got, expected in zip(proposals.proposals, hand):
        assert (got.document, got.position, got.answer) == (
            expected["document"], expected["position"], expected["answer"])
        assert got.candidates == expected["candidates"]
        assert got.log_probs == pytest.approx(expected["log_probs"], abs=1e-5)
    stats = infill_rescore.summary(proposals)
    in_top = sum(row["answer"] in row["candidates"] for row in hand)
    direct = sum(row["answer"] == row["candidates"][0] for row in hand)
    assert 0 < in_top < len(hand)  # a meaningful bound
    assert stats["upper_bound"] == pytest.approx(100 * in_top / len(hand))
    assert stats["direct_accuracy"] == pytest.approx(100 * direct / len(hand))


def test_batched_candidates_equal_each_alone_and_the_hand_sums(word_setup):
    data, checkpoints = word_setup["data"], word_setup["checkpoints"]
    proposer = load_scoring_model(checkpoints["msk_bi"], data, "--proposer")
    proposals, dataset = infill_rescore.make_proposals(proposer, data, "valid", "1", 1, 6)
    scorer = load_scoring_model(checkpoints["hyb_uni"], data, "--scorer")
    chosen, batched = infill_rescore.rescore(scorer, dataset, proposals)
    for proposal, pick, scores in zip(proposals.proposals[:6], chosen, batched):
        tokens = word_setup["documents"][proposal.document]
        copies = infill_rescore.filled_in(np.asarray(tokens), proposal.position,
                                          proposal.candidates)
        assert [int(c[proposal.position]) for c in copies] == proposal.candidates
        alone = [sequence_log_likelihoods(scorer, [copy])[0] for copy in copies]
        hand = [hand_log_likelihood(scorer.model, [int(t) for t in copy]) for copy in copies]
        assert scores == pytest.approx(alone, rel=1e-5, abs=1e-5)
        assert scores == pytest.approx(hand, rel=1e-5, abs=1e-5)
        assert pick == proposal.candidates[int(np.argmax(scores))]


def test_rescored_accuracy_is_the_argmax_of_hand_scores(word_setup, tmp_path, capsys):
    data, checkpoints = word_setup["data"], word_setup["checkpoints"]
    scorers = [checkpoints["nxt_uni"], checkpoints["hyb_uni"]]
    args = ["--proposer", checkpoints["msk_bi"], "--top-k", "12", "--eval-seed", "2",
            "--json", tmp_path / "results.json"]
    for scorer in scorers:
        args += ["--scorer", scorer]
    assert infill_rescore.main([str(data), "--cpu", *map(str, args)]) == 0
    printed = capsys.readouterr().out
    results = json.loads((tmp_path / "results.json").read_text())
    proposer = load_scoring_model(checkpoints["msk_bi"], data).model
    hand, _, _ = hand_proposals(proposer, word_setup["documents"], 12, "1", 2)
    assert (f"documents {len(hand)} | positions {len(hand)} | skipped 3 (2 without a non-special "
            "token, 1 shorter than 2 tokens)") in printed
    outcomes = []  # per scorer, 1/0 per position, by hand
    for scorer_path, row in zip(scorers, results["scorers"]):
        model = load_scoring_model(scorer_path, data).model
        margins = []
        outcomes.append([])
        for proposal in hand:
            tokens = list(word_setup["documents"][proposal["document"]])
            scores = []
            for candidate in proposal["candidates"]:
                tokens[proposal["position"]] = candidate
                scores.append(hand_log_likelihood(model, tokens))
            ranked = sorted(scores, reverse=True)
            margins.append(ranked[0] - ranked[1])
            outcomes[-1].append(int(proposal["candidates"][int(np.argmax(scores))] == proposal["answer"]))
        assert row["correct_by_position"] == outcomes[-1]
        assert min(margins) > 1e-4  # the hand argmax is unambiguous at float32 precision
        correct = sum(outcomes[-1])
        assert row["correct"] == correct
        assert row["accuracy"] == pytest.approx(100 * correct / len(hand))
        share = correct / len(hand)
        assert f"scorer {scorer_path} ({row['variant']}) | full-sequence, n_bidir 0 | accuracy " \
               f"{100 * share:.2f} ± {100 * math.sqrt(share * (1 - share) / len(hand)):.2f}" in printed
    in_top = sum(p["answer"] in p["candidates"] for p in hand)
    assert f"top-12 upper bound (answer among the candidates) | accuracy {100 * in_top / len(hand):.2f}" \
        in printed
    # paired differences: the other scorer against the best, the best against direct infilling,
    # each mean(c_A - c_B) with sd(c_A - c_B, ddof 1) / sqrt(N), in points
    best = 0 if sum(outcomes[0]) >= sum(outcomes[1]) else 1
    direct = [int(p["candidates"][0] == p["answer"]) for p in hand]
    expected = [(outcomes[1 - best], outcomes[best]), (outcomes[best], direct)]
    assert len(results["differences"]) == 2
    for row, (a, b) in zip(results["differences"], expected):
        d = [x - y for x, y in zip(a, b)]
        mean = sum(d) / len(d)
        sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (len(d) - 1))
        assert row["difference"] == pytest.approx(100 * mean)
        assert row["standard_error"] == pytest.approx(100 * sd / math.sqrt(len(d)))
        assert row["resolved"] is (abs(mean) > 2 * sd / math.sqrt(len(d)))
        assert (f"{row['a']} - {row['b']} | {100 * mean:+.2f} ± {100 * sd / math.sqrt(len(d)):.2f}"
                in printed)
    assert results["differences"][0]["b"] == f"{scorers[best]} ({results['scorers'][best]['variant']})"
    assert results["differences"][1]["b"].startswith("proposer ")


def test_candidate_files_round_trip_and_shrink(word_setup, tmp_path):
    data, checkpoints = word_setup["data"], word_setup["checkpoints"]
    path = tmp_path / "candidates.jsonl"
    made = infill_rescore.run(rescore_args(data, "--proposer", checkpoints["msk_bi"], "--top-k",
                                           "10", "--candidates-out", path, "--scorer",
                                           checkpoints["nxt_uni"]))
    header = json.loads(path.read_text().splitlines()[0])
    assert header["dictionary_sha256"] == dictionary_fingerprint(
        load_scoring_model(checkpoints["nxt_uni"], data).dictionary)
    assert header["top_k"] == 10 and header["documents"] == len(word_setup["documents"]) - 3
    reused = infill_rescore.run(rescore_args(data, "--candidates-in", path, "--scorer",
                                             checkpoints["nxt_uni"]))
    assert reused == made
    # --top-k 4 from the file: the proposer's top 4, as a run with --top-k 4 gives
    shrunk = infill_rescore.run(rescore_args(data, "--candidates-in", path, "--top-k", "4",
                                             "--scorer", checkpoints["hyb_uni"]))
    direct = infill_rescore.run(rescore_args(data, "--proposer", checkpoints["msk_bi"], "--top-k",
                                             "4", "--scorer", checkpoints["hyb_uni"]))
    assert shrunk["summary"] == direct["summary"] and shrunk["scorers"] == direct["scorers"]
    for flags, message in [
        (["--top-k", "11"], "--top-k 11: --candidates-in .* holds 10 candidates"),
        (["--eval-seed", "2"], "--eval-seed 2: --candidates-in .* was made with --eval-seed 1"),
        (["--r-bidir", "0.5"], "--r-bidir 0.5: --candidates-in"),
    ]:
        with pytest.raises(ScoringError, match=message):
            infill_rescore.run(rescore_args(data, "--candidates-in", path, *flags, "--scorer",
                                            checkpoints["nxt_uni"]))


def test_candidates_of_another_dictionary_are_refused(word_setup, tmp_path, capsys):
    data, other, checkpoints = word_setup["data"], word_setup["other"], word_setup["checkpoints"]
    path = tmp_path / "candidates.jsonl"
    infill_rescore.run(rescore_args(data, "--proposer", checkpoints["msk_bi"], "--candidates-out",
                                    path))
    # the same text binarized with a reordered dictionary, scored by a checkpoint trained on it
    code = infill_rescore.main([str(other), "--cpu", "--candidates-in", str(path), "--scorer",
                                str(checkpoints["other_nxt_uni"])])
    error = capsys.readouterr().err
    assert code == 2 and error.count("\n") == 1
    assert f"--candidates-in {path}" in error and "another dictionary" in error
    assert "--scorer" in error and "token ids would mean different tokens" in error
    # the check itself, against the dictionary the scorer loaded on the other data-bin
    proposals = infill_rescore.read_candidates(path)
    scorer = load_scoring_model(checkpoints["other_nxt_uni"], other, "--scorer")
    with pytest.raises(ScoringError, match=r"--candidates-in .*another dictionary.* than the one "
                                           r"the --scorer checkpoints score with \(DATA "):
        infill_rescore.check_fingerprint(proposals, path, scorer.dictionary, other)
    infill_rescore.check_fingerprint(  # the proposer's own dictionary passes
        proposals, path, load_scoring_model(checkpoints["msk_bi"], data).dictionary, data)
    # a file edited by hand: fingerprint or documents off
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_text("\n".join([json.dumps(dict(header, dictionary_sha256="0" * 64))] + lines[1:]))
    with pytest.raises(ScoringError, match="another dictionary"):
        infill_rescore.run(rescore_args(data, "--candidates-in", tampered, "--scorer",
                                        checkpoints["nxt_uni"]))
    row = json.loads(lines[1])
    tampered.write_text("\n".join([lines[0], json.dumps(dict(row, position=row["position"] + 1))]
                                  + lines[2:]))
    with pytest.raises(ScoringError, match="does not match DATA"):
        infill_rescore.run(rescore_args(data, "--candidates-in", tampered, "--scorer",
                                        checkpoints["nxt_uni"]))
    tampered.write_text("not json\n")
    with pytest.raises(ScoringError, match="not a candidates file"):
        infill_rescore.read_candidates(tampered)


def test_checkpoints_that_cannot_serve_a_role_are_refused(word_setup, capsys):
    data, checkpoints = word_setup["data"], word_setup["checkpoints"]
    cases = [
        (["--proposer", checkpoints["nxt_uni"], "--scorer", checkpoints["hyb_uni"]],
         ["--proposer", "never trained on <mask> tokens", "as --scorer"]),
        (["--proposer", checkpoints["msk_bi"], "--scorer", checkpoints["msk_bi"]],
         ["--scorer", "never trained to predict next tokens", "as --proposer"]),
        (["--scorer", checkpoints["hyb_uni"]], ["exactly one of --proposer"]),
        (["--proposer", checkpoints["msk_bi"]], ["nothing to do"]),
        (["--proposer", checkpoints["msk_bi"], "--scorer", checkpoints["nxt_uni"], "--r-bidir",
          "1.5"], ["--r-bidir '1.5'", "outside [0, 1]"]),
        (["--proposer", checkpoints["msk_bi"], "--scorer", checkpoints["nxt_uni"], "--top-k",
          "45"], ["--top-k 45: must lie in 1..40"]),
        (["--proposer", word_setup["root"] / "missing.pt", "--scorer", checkpoints["nxt_uni"]],
         ["--proposer: checkpoint", "cannot be opened"]),
    ]
    for flags, fragments in cases:
        assert infill_rescore.main([str(data), "--cpu", *map(str, flags)]) == 2
        error = capsys.readouterr().err
        assert error.startswith("infill_rescore.py: error: ") and error.count("\n") == 1, error
        for fragment in fragments:
            assert fragment in error, (fragment, error)


# --- 3. Tables 7-8 -------------------------------------------------------------------------------

SPM_WORDS = ("the a cat dog sat ran on in to mat moon house garden it rains so street is wet sun "
             "shines sky blue man walks park and").split()


@pytest.fixture(scope="module")
def spm_setup(tmp_path_factory):
    """A data-bin with a small BPE sentencepiece model (spm.model + its dict.txt, as the corpus
    pipeline writes them) trained on random sentences and the shipped rows; checkpoints of
    hyb_uni (both scorings), nxt_uni and msk_bi on it."""
    root = tmp_path_factory.mktemp("spm")
    rng = np.random.default_rng(2)
    lines = [" ".join(rng.choice(SPM_WORDS, rng.integers(4, 10))) + ", right? "
             + rng.choice(["Yes", "No", "Also"]) + ", " + " ".join(rng.choice(SPM_WORDS, 4)) + "."
             for _ in range(300)]
    for name in ("choices_context.jsonl", "choices_mnli.jsonl"):
        for row in map(json.loads, (DATA_DIR / name).read_text().splitlines()):
            lines += [row.get("context", ""), row.get("prefix", ""), row.get("suffix", "")]
            lines += row["choices"]
    (root / "text.txt").write_text("\n".join(line for line in lines if line) + "\n")
    data = root / "bin"
    data.mkdir()
    train_sentencepiece(root / "text.txt", data / "spm.model", vocab_size=150, model_type="bpe",
                        character_coverage=1.0, input_sentence_size=10000, threads=1)
    write_sentencepiece_dictionary(data / "spm.model", data / "dict.txt")
    checkpoints = {variant: write_checkpoint(data, variant, root / f"{variant}.pt", seed)
                   for seed, variant in enumerate(("hyb_uni", "nxt_uni", "msk_bi"))}
    return {"data": data, "checkpoints": checkpoints,
            "spm": sentencepiece.SentencePieceProcessor(model_file=str(data / "spm.model"))}


def hand_encode(spm, dictionary, text):
    return [dictionary.index(piece) for piece in spm.encode(text, out_type=str)] + [EOS]


def hand_row_texts(row, separator=" "):
    if "context" in row:
        return [f"{row['context']}{separator}{c}" if row["context"] else c for c in row["choices"]]
    return [row["prefix"] + c + row["suffix"] for c in row["choices"]]


def read_jsonl(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("normalization", ["token", "none", "char"])
def test_full_sequence_choices_by_hand(spm_setup, tmp_path, normalization, capsys):
    data, checkpoint = spm_setup["data"], spm_setup["checkpoints"]["nxt_uni"]
    output = tmp_path / "predictions.jsonl"
    rows_path = DATA_DIR / "choices_context.jsonl"
    assert multiple_choice.main(["--path", str(checkpoint), "--data", str(data), "--input",
                                 str(rows_path), "--normalization", normalization, "--output",
                                 str(output), "--cpu"]) == 0
    printed = capsys.readouterr().out
    predictions = read_jsonl(output)
    scoring = load_scoring_model(checkpoint, data)
    correct = labelled = 0
    for row, prediction in zip(read_jsonl(rows_path), predictions):
        sequences = [hand_encode(spm_setup["spm"], scoring.dictionary, text)
                     for text in hand_row_texts(row)]
        shared = 0
        while all(len(s) > shared + 1 and s[shared] == sequences[0][shared] for s in sequences):
            shared += 1
        start = max(shared, 1)
        scores = []
        for choice, seq in zip(row["choices"], sequences):
            lp = hand_log_probs(scoring.model, seq)
            total = sum(float(lp[t - 1, seq[t]]) for t in range(start, len(seq)))
            scores.append({"none": total, "token": total / (len(seq) - start),
                           "char": total / len(choice)}[normalization])
        assert prediction["scores"] == pytest.approx(scores, rel=1e-5, abs=1e-5)
        assert prediction["prediction"] == int(np.argmax(scores))
        assert prediction["choices"] == row["choices"]
        if "label" in row:
            label = row["label"] if isinstance(row["label"], int) else row["choices"].index(row["label"])
            assert prediction["label"] == label
            labelled += 1
            correct += prediction["prediction"] == label
    assert labelled == 6 and len(predictions) == 7
    assert f"accuracy {100 * correct / labelled:.2f} ({correct}/{labelled} labelled rows)" in printed
    assert f"full-sequence, n_bidir 0, {normalization} normalization" in printed


@pytest.mark.parametrize("r_bidir", ["1", "0.5"])
def test_infill_verbalizer_logits_by_hand(spm_setup, tmp_path, r_bidir):
    data, checkpoint = spm_setup["data"], spm_setup["checkpoints"]["hyb_uni"]
    rows_path = DATA_DIR / "choices_mnli.jsonl"
    args = multiple_choice.build_parser().parse_args([
        "--path", str(checkpoint), "--data", str(data), "--input", str(rows_path), "--scoring",
        "infill", "--r-bidir", r_bidir, "--cpu", "--batch-size", "4"])
    results = multiple_choice.run(args)
    scoring = load_scoring_model(checkpoint, data)
    dictionary = scoring.dictionary
    verbalizers = [dictionary.index(f"\u2581{word}") for word in ("Yes", "No", "Also")]
    assert min(verbalizers) > UNK  # each a piece of the data-bin's sentencepiece model
    correct = 0
    for row, prediction in zip(read_jsonl(rows_path), results["rows"]):
        tokens = hand_encode(spm_setup["spm"], dictionary, row["prefix"] + "Yes" + row["suffix"])
        position = tokens.index(verbalizers[0])
        for verbalizer, choice in zip(verbalizers, row["choices"]):  # one token each
            filled = hand_encode(spm_setup["spm"], dictionary, row["prefix"] + choice + row["suffix"])
            assert filled == tokens[:position] + [verbalizer] + tokens[position + 1:]
        logits = hand_infill_logits(scoring.model, tokens, position, r_bidir,
                                    dictionary.index("<mask>"))
        expected = [float(logits[v]) for v in verbalizers]
        assert prediction["scores"] == pytest.approx(expected, rel=1e-5, abs=1e-5)
        assert prediction["prediction"] == int(np.argmax(expected))
        correct += prediction["prediction"] == row["label"]
    assert results["correct"] == correct and results["labelled"] == 6
    # the batched helper on the same layouts, and the r_bidir that reaches it
    documents = [hand_encode(spm_setup["spm"], dictionary, "It rains, right? Yes, the sun shines.")]
    position = documents[0].index(verbalizers[0])
    got = infill_logits(scoring, documents, [position], float(r_bidir))[0]
    torch.testing.assert_close(got.double(),
                               hand_infill_logits(scoring.model, documents[0], position, r_bidir,
                                                  dictionary.index("<mask>")),
                               rtol=1e-5, atol=1e-5)


def test_template_rows_equal_prefix_suffix_rows(spm_setup):
    data, checkpoint = spm_setup["data"], spm_setup["checkpoints"]["hyb_uni"]
    common = ["--path", str(checkpoint), "--data", str(data), "--cpu"]
    parser = multiple_choice.build_parser()
    for scoring in ("full", "infill"):
        by_rows = multiple_choice.run(parser.parse_args(
            common + ["--input", str(DATA_DIR / "choices_mnli.jsonl"), "--scoring", scoring]))
        by_template = multiple_choice.run(parser.parse_args(
            common + ["--input", str(DATA_DIR / "choices_premise_hypothesis.jsonl"), "--scoring",
                      scoring, "--template", multiple_choice.TABLE_8_TEMPLATE,
                      "--choices", "Yes,No,Also"]))
        for a, b in zip(by_rows["rows"], by_template["rows"]):
            assert a["scores"] == pytest.approx(b["scores"], rel=1e-6, abs=1e-6)
            assert (a["label"], a["prediction"]) == (b["label"], b["prediction"])


def test_choice_errors_name_the_row_and_the_option(spm_setup, tmp_path, capsys):
    data, checkpoints = spm_setup["data"], spm_setup["checkpoints"]
    rows = tmp_path / "rows.jsonl"

    def run(lines, *flags, checkpoint="hyb_uni"):
        rows.write_text("\n".join(json.dumps(line) if isinstance(line, dict) else line
                                  for line in lines) + "\n")
        code = multiple_choice.main(["--path", str(checkpoints[checkpoint]), "--data", str(data),
                                     "--input", str(rows), "--cpu", *flags])
        error = capsys.readouterr().err
        assert code == 2 and error.startswith("score_choices.py: error: ") and error.count("\n") == 1, error
        return error

    mnli = {"prefix": "It rains, right? ", "suffix": ", the street is wet.",
            "choices": ["Yes", "Not at all"], "label": 0}
    error = run(["", {"context": "a", "choices": ["sky", "sun"]}, mnli], "--scoring", "infill")
    assert f"--input {rows}:3: choice 'Not at all' fills" in error
    assert "single-token verbalizers" in error and "--scoring full" in error
    error = run([mnli], "--scoring", "infill", checkpoint="nxt_uni")
    assert "never trained on <mask> tokens" in error and "--scoring infill" in error
    error = run([mnli], checkpoint="msk_bi")
    assert "never trained to predict next tokens" in error and "--scoring full" in error
    assert f"{rows}:1: \"label\" 3 is outside 0..1" in run([dict(mnli, label=3)])
    assert f"{rows}:2: not JSON" in run([mnli, "{oops"])
    assert "at least 2 non-empty strings" in run([dict(mnli, choices=["Yes"])])
    assert "needs \"context\"" in run([{"choices": ["a", "b"]}])
    assert "needs the field 'hypothesis'" in run([{"premise": "x"}], "--template",
                                                 multiple_choice.TABLE_8_TEMPLATE,
                                                 "--choices", "Yes,No")
    assert "{choice} exactly once" in run([mnli], "--template", "{premise}")
    assert "--r-bidir 0.5 belongs to --scoring infill" in run([mnli], "--r-bidir", "0.5")
    assert "--r-bidir '2'" in run([mnli], "--scoring", "infill", "--r-bidir", "2")
    no_spm = tmp_path / "no_spm"
    no_spm.mkdir()
    (no_spm / "dict.txt").write_text((data / "dict.txt").read_text())
    code = multiple_choice.main(["--path", str(checkpoints["hyb_uni"]), "--data", str(no_spm),
                                 "--input", str(DATA_DIR / "choices_mnli.jsonl"), "--cpu"])
    assert code == 2 and "no spm.model" in capsys.readouterr().err


def test_whitespace_tokenizer_and_help(word_setup, tmp_path):
    """--tokenizer none on a word-level data-bin, and both scripts' --help run as scripts."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"context": "w1 w2", "choices": ["w3 w4", "w5"], "label": 1}) + "\n")
    scoring = load_scoring_model(word_setup["checkpoints"]["nxt_uni"], word_setup["data"])
    args = multiple_choice.build_parser().parse_args([
        "--path", str(word_setup["checkpoints"]["nxt_uni"]), "--data", str(word_setup["data"]),
        "--input", str(rows), "--tokenizer", "none", "--normalization", "none", "--cpu"])
    result = multiple_choice.run(args)["rows"][0]
    expected = [hand_log_likelihood(scoring.model, [W[1], W[2], W[3], W[4], EOS])
                - float(hand_log_probs(scoring.model, [W[1], W[2]])[0, W[2]]),
                hand_log_likelihood(scoring.model, [W[1], W[2], W[5], EOS])
                - float(hand_log_probs(scoring.model, [W[1], W[2]])[0, W[2]])]
    assert result["scores"] == pytest.approx(expected, rel=1e-5, abs=1e-5)
    for script, fragment in (("score_choices.py", "Artetxe et al. (2021)"),
                             ("infill_rescore.py", "--candidates-in")):
        proc = subprocess.run([python_cli(), str(REPO_ROOT / "scripts" / script), "--help"],
                              capture_output=True, text=True, check=True)
        assert fragment in proc.stdout


def test_one_input_is_one_document_even_with_an_empty_line_inside(word_setup, tmp_path):
    """The blank-line document rule belongs to data-bins only: an input of score_choices.py (or a
    fine-tuning example, example_layout) holding ``</s> </s>`` (what an empty line looks like in a
    data-bin; RoBERTa's sentence-pair separator) is still one document: positions run through it
    and every token attends to all before it. Its score equals the hand log-likelihood of the
    whole input, not the sum over the two halves an empty-line split would make."""
    from fairseq_ext.models.bidirectional_lm import example_layout

    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"context": "w1 w2 </s> </s> w3", "choices": ["w4 w5", "w6"]}) + "\n")
    scoring = load_scoring_model(word_setup["checkpoints"]["nxt_uni"], word_setup["data"])
    args = multiple_choice.build_parser().parse_args([
        "--path", str(word_setup["checkpoints"]["nxt_uni"]), "--data", str(word_setup["data"]),
        "--input", str(rows), "--tokenizer", "none", "--normalization", "none", "--cpu"])
    result = multiple_choice.run(args)["rows"][0]
    whole = [[W[1], W[2], EOS, EOS, W[3], W[4], W[5], EOS], [W[1], W[2], EOS, EOS, W[3], W[6], EOS]]

    def choice_log_likelihood(seq, first):  # the tokens after the shared 5-token context
        lp = hand_log_probs(scoring.model, list(seq))
        return sum(float(lp[t - 1, seq[t]]) for t in range(first, len(seq)))

    one_document = [choice_log_likelihood(seq, 5) for seq in whole]
    split = [choice_log_likelihood(seq[4:], 1) for seq in whole]  # w3 ... after the "empty line"
    assert result["scores"] == pytest.approx(one_document, rel=1e-5, abs=1e-5)
    assert all(abs(a - b) > 1e-3 for a, b in zip(one_document, split))
    tokens = torch.tensor([whole[0]])
    for r_bidir in (0.0, 1.0):
        positions, doc_ids, bidir_lens = example_layout(tokens, PAD, r_bidir)
        assert positions.tolist() == [list(range(8))] and doc_ids.tolist() == [[0] * 8]
        assert bidir_lens.tolist() == [[int(8 * r_bidir)] * 8]


# --- slow: fairseq-train checkpoints, fairseq-validate's positions -------------------------------

@pytest.mark.slow
def test_proposer_matches_fairseq_validate_infill(tmp_path):
    """Checkpoints trained by fairseq-train on documents of several lines separated by empty
    lines (the default --document-format): infill_rescore.py proposes, and re-scores, at the
    positions of fairseq-validate --eval-mode infill on the same seed, one whole document per
    input (the blank-line documents, with the </s> of their inner lines), and its proposer
    accuracy equals fairseq-validate's."""
    rng = np.random.default_rng(21)
    valid_lines = with_empty_lines(random_documents(rng, 14, 2, 30), 3) + [[EOS], [UNK, EOS], [EOS]]
    documents = reference_documents(valid_lines, "blank_line_separated", 64)
    assert sum(doc.count(EOS) > 1 for doc in documents) >= 4
    data = write_data_bin(tmp_path / "bin", {"train": with_empty_lines(random_documents(
        rng, 120, 2, 30), 4), "valid": valid_lines}, word_dictionary())
    one_thread = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    train = ["--task", "bidirectional_lm", "--criterion", "bidirectional_lm", "--arch",
             "bidir_lm_tiny", "--tokens-per-sample", "64", "--max-tokens", "512", "--optimizer",
             "adam", "--lr", "3e-3", "--cpu", "--num-workers", "0", "--seed", "3",
             "--max-update", "4", "--no-epoch-checkpoints", "--disable-validation",
             "--no-progress-bar"]
    procs = [subprocess.Popen([fairseq_cli("fairseq-train"), str(data), "--user-dir", str(USER_DIR),
                               "--variant", variant, "--save-dir", str(tmp_path / variant), *train],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, **one_thread})
             for variant in ("msk_bi", "nxt_uni")]
    for proc in procs:
        assert proc.wait(timeout=300) == 0, proc.stderr.read()[-3000:]
    msk, nxt = (tmp_path / v / "checkpoint_last.pt" for v in ("msk_bi", "nxt_uni"))
    validate = subprocess.Popen(
        [fairseq_cli("fairseq-validate"), str(data), "--user-dir", str(USER_DIR), "--path",
         str(msk), "--task", "bidirectional_lm", "--eval-mode", "infill", "--r-bidir", "1",
         "--eval-seed", "3", "--cpu", "--num-workers", "0", "--batch-size", "4",
         "--log-format", "json"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, **one_thread})
    rescored = run_cli([sys.executable, REPO_ROOT / "scripts" / "infill_rescore.py", data,
                        "--proposer", msk, "--scorer", nxt, "--eval-seed", "3", "--top-k", "32",
                        "--cpu", "--json", tmp_path / "results.json", "--candidates-out",
                        tmp_path / "candidates.jsonl"], env=one_thread)
    output = validate.communicate(timeout=300)[0]
    assert validate.returncode == 0, output[-3000:]
    record = json_log_records(output, key="valid_loss")[-1]
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["header"]["document_format"] == "blank_line_separated"
    assert results["header"]["skipped_no_maskable_token"] == 1  # <unk> </s>
    assert results["summary"]["documents"] == len(documents) - 1
    candidates = [json.loads(line) for line in
                  (tmp_path / "candidates.jsonl").read_text().splitlines()[1:]]
    for row in candidates:  # each proposal is about a whole document of the blank-line rule
        assert row["length"] == len(documents[row["document"]])
        assert documents[row["document"]][row["position"]] == row["answer"]
    assert results["summary"]["direct_accuracy"] == pytest.approx(float(record["valid_infill_acc_r1"]),
                                                                  abs=0.006)
    assert "scorer" in rescored.stdout and "nxt_uni" in rescored.stdout
