"""Evaluation modes of ``bidirectional_lm`` (Artetxe et al. 2022, §3.2,
Tables 3-5): fairseq_ext.data.bidirectional_eval_dataset, the task's ``--eval-mode`` /
``--r-bidir`` / ``--suffix-fraction`` / ``--eval-seed`` / ``--infill-positions`` /
``--eval-scores-out`` / ``--document-format`` and the criterion's per-R metrics with their
standard errors, each against a hand computation.

1. the layouts (``suffix_split`` / ``suffix_layout`` / ``infill_layout`` / ``full_doc_layout``)
   by hand, and no predicted position can see its target for any n in 2..40 and R of Table 4;
2. the evaluation dataset's items and batch against a hand construction (skipped documents
   counted; infill positions fixed per (eval seed, document), never a special token);
3. the criterion's metrics on a tiny model against per-token log-probabilities computed here,
   one document at a time (full-document ppl, suffix ppl per R, infill accuracy / loss / ppl per
   R, their standard errors against the delta method / binomial written out here, and the report
   lines), on documents separated by empty lines (the default) and one per line;
4. (slow) stock ``fairseq-train`` then ``fairseq-validate --eval-mode ...`` on its checkpoints:
   printed lines and JSON metrics against the same hand computation on the checkpoint loaded
   in-process, every document accounted for, and the errors that name their flag.
"""
import functools
import math
import os
import re
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction

import numpy as np
import pytest
import torch
from fairseq import checkpoint_utils, metrics
from fairseq.criterions.masked_lm import MaskedLmConfig
from fairseq.data import Dictionary, ListDataset
from test_bidirectional_lm_data import reference_documents, with_empty_lines, write_data_bin
from test_bidirectional_lm_model import tiny_model

import fairseq_ext  # noqa: F401  (registers the task, model and criterion)
from conftest import USER_DIR, fairseq_cli, json_log_records, run_cli
from fairseq_ext.criterions.bidirectional_lm import (
    BidirectionalLmLoss,
    evaluation_report_lines,
    evaluation_stats,
)
from fairseq_ext.data.bidirectional_eval_dataset import (
    BidirectionalEvalDataset,
    DocumentLayout,
    full_doc_layout,
    infill_layout,
    suffix_layout,
    suffix_split,
)
from fairseq_ext.data.bidirectional_lm_dataset import BidirectionalLMDataset, arrange_document
from fairseq_ext.data.documents import BLANK_LINE_SEPARATED, DOCUMENT_FORMATS, LINES, spread_indices
from fairseq_ext.modules.bidirectional_attention_mask import may_attend
from fairseq_ext.reporting.eval_scores import read_eval_scores
from fairseq_ext.tasks.bidirectional_lm import BidirectionalLMConfig, BidirectionalLMTask

BOS, PAD, EOS, UNK = 0, 1, 2, 3
N_WORDS = 40
TOKENS_PER_SAMPLE = 64
R_TABLE_4 = (0.0, 0.25, 0.5, 0.75, 1.0)


def padded_dictionary() -> Dictionary:
    """w0..w39 padded to a multiple of 8 with ``madeupword`` symbols, as fairseq-preprocess
    writes it (48 symbols; the task then adds ``<mask>``)."""
    dictionary = Dictionary()
    for i in range(N_WORDS):
        dictionary.add_symbol(f"w{i}")
    dictionary.pad_to_multiple_(8)
    return dictionary


DICTIONARY = padded_dictionary()
W = [DICTIONARY.index(f"w{i}") for i in range(N_WORDS)]
A, B, C, D, E, F = W[:6]
MADEUP = DICTIONARY.index("madeupword0000")
MASK = len(DICTIONARY)  # what the task's add_symbol("<mask>") gives
#: every id infilling must never mask nor predict: fairseq's four specials, <mask>, madeupwords
SPECIALS = sorted({BOS, PAD, EOS, UNK, MASK} | {i for i, s in enumerate(DICTIONARY.symbols)
                                              if s.startswith("madeupword")})
WORD_IDS = np.array(W)


def half_up(ratio, count: int) -> int:
    """``ratio x count`` rounded to the nearest integer, halves up, in exact decimal arithmetic
    (the ratio as the user typed it)."""
    return math.floor(Fraction(str(ratio)) * count + Fraction(1, 2))


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


# --- 1. layouts by hand --------------------------------------------------------------------------

@pytest.mark.parametrize("n, fraction, expected", [
    (5, 0.2, (4, 1)),
    (10, 0.2, (8, 2)),
    (12, 0.2, (10, 2)),    # 2.4 -> 2
    (13, 0.2, (10, 3)),    # 2.6 -> 3
    (100, 0.2, (80, 20)),  # the paper's 0.8 n / 0.2 n
    (2, 0.2, (1, 1)),      # 0.4 -> 0, but at least 1
    (4, 0.1, (3, 1)),      # 0.4 -> 0, at least 1
    (5, 0.5, (2, 3)),      # 2.5 -> 3: halves up
    (7, 0.5, (3, 4)),      # 3.5 -> 4
    (3, 0.5, (1, 2)),      # 1.5 -> 2
    (4, 0.5, (2, 2)),
    (10, 0.25, (7, 3)),    # 2.5 -> 3
    (12, 0.25, (9, 3)),
    (2, 0.9, (1, 1)),      # 1.8 -> 2, but the first token is never a target: at most n - 1
    (10, 0.99, (1, 9)),
])
def test_suffix_split_by_hand(n, fraction, expected):
    assert suffix_split(n, fraction) == expected


@pytest.mark.parametrize("n, fraction, r_bidir, n_bidir, n_predict", [
    (10, 0.2, 0.0, 0, 3),   # prefix 8, 2 targets: window of 3 slots (the last has no target)
    (10, 0.2, 0.5, 4, 3),
    (10, 0.2, 1.0, 8, 3),
    (5, 0.2, 0.5, 2, 2),    # prefix 4
    (7, 0.2, 0.5, 3, 2),    # prefix 6
    (6, 0.2, 0.25, 1, 2),   # prefix 5: 1.25 -> 1
    (6, 0.2, 0.75, 4, 2),   # 3.75 -> 4
    (7, 0.5, 0.5, 2, 5),    # prefix 3: 1.5 -> 2, halves up
    (12, 0.25, 0.75, 7, 4),  # prefix 9: 6.75 -> 7
    (10, 0.25, 0.5, 4, 4),  # prefix 7: 3.5 -> 4
    (2, 0.2, 0.5, 1, 2),    # prefix 1: 0.5 -> 1
    (2, 0.2, 0.25, 0, 2),   # 0.25 -> 0
    (2, 0.2, 1.0, 1, 2),
])
def test_suffix_layout_by_hand(n, fraction, r_bidir, n_bidir, n_predict):
    assert suffix_layout(n, fraction, r_bidir) == DocumentLayout((), n_bidir, n_predict)


@pytest.mark.parametrize("n, position, r_bidir, n_bidir", [
    (5, 2, 0.5, 3),    # 2.5 -> 3
    (5, 0, 0.25, 1),   # 1.25 -> 1
    (6, 3, 0.25, 2),   # 1.5 -> 2
    (2, 0, 0.25, 1),   # 0.5 -> 1
    (2, 0, 0.2, 0),    # 0.4 -> 0
    (7, 6, 1.0, 7),
    (9, 4, 0.0, 0),
    (10, 9, 0.75, 8),  # 7.5 -> 8
])
def test_infill_layout_by_hand(n, position, r_bidir, n_bidir):
    assert infill_layout(n, position, r_bidir) == DocumentLayout((position,), n_bidir, 1)


def test_full_doc_layout_by_hand():
    for n in (2, 3, 17):
        assert full_doc_layout(n) == DocumentLayout((), 0, n)


def test_decimal_halves_round_up():
    assert suffix_split(45, 0.7) == (45 - 32, 32)
    assert suffix_layout(91, 0.5, 0.7).n_bidir == half_up(0.7, 45) == 32
    assert infill_layout(90, 0, 0.35).n_bidir == half_up(0.35, 90) == 32


@functools.lru_cache(maxsize=None)
def allowed_keys(n: int, n_bidir: int) -> np.ndarray:
    """The model's mask of one document (``[i, j]``: slot i may attend to slot j), checked
    against §2's rule ``j <= i or j < n_bidir``."""
    doc_ids = torch.zeros(1, n, dtype=torch.long)
    mask = may_attend(doc_ids, torch.full((1, n), n_bidir), cross_document=True)[0, 0].numpy()
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    assert (mask == ((j <= i) | (j < n_bidir))).all()
    return mask


def check_no_leak(tokens, layout):
    """The item of ``layout`` (arrange_document, as the dataset builds it): every predicted slot
    must not attend to a slot holding its target token as input, and a next-token target must
    be predicted from the tokens up to its predecessor only. Returns the predicted
    ``(slot, original position of its target)`` pairs."""
    n = len(tokens)
    source, positions, target = arrange_document(np.asarray(tokens), np.asarray(layout.masked,
                                                 dtype=np.int64), layout.n_predict, MASK, PAD)
    mask = allowed_keys(n, layout.n_bidir)
    predicted = []
    for slot in np.flatnonzero(target != PAD):
        is_masked = source[slot] == MASK
        target_position = positions[slot] if is_masked else positions[slot] + 1
        assert target[slot] == tokens[target_position]
        holders = np.flatnonzero((positions == target_position) & (source != MASK))
        assert not mask[slot, holders].any()
        if not is_masked:  # x_{t+1} from x_<=t only: no later token either
            assert not mask[slot, positions > positions[slot]].any()
        predicted.append((int(slot), int(target_position)))
    return predicted


def test_no_predicted_position_sees_its_target():
    rng = np.random.default_rng(0)
    for n in range(2, 41):
        tokens = list(rng.choice(WORD_IDS, n - 1)) + [EOS]
        full = check_no_leak(tokens, full_doc_layout(n))
        assert full == [(t, t + 1) for t in range(n - 1)]  # every next token, n - 1 of them
        for r_bidir in R_TABLE_4:
            for fraction in (0.2, 0.5):
                n_prefix, n_suffix = suffix_split(n, fraction)
                predicted = check_no_leak(tokens, suffix_layout(n, fraction, r_bidir))
                # the n_suffix positions n_prefix - 1 .. n - 2 predict the last n_suffix tokens
                assert predicted == [(t, t + 1) for t in range(n_prefix - 1, n - 1)]
                assert len(predicted) == n_suffix >= 1
            for position in range(n):
                predicted = check_no_leak(tokens, infill_layout(n, position, r_bidir))
                assert predicted == [(n - 1, position)]  # the <mask> moved to the end


# --- 2. the dataset by hand ----------------------------------------------------------------------

HAND_DOCUMENTS = [
    [A, B, C, D, EOS],                # 0
    [EOS],                            # 1: one token: no next-token target, only specials
    [A, EOS],                         # 2: the shortest scorable document
    [UNK, EOS],                       # 3: only specials: nothing to infill
    [C, MADEUP, D, E, F, A, EOS],     # 4: a madeupword is never infilled
]
P = PAD


def eval_dataset(documents, mode, r_values=(), suffix_fraction=0.2, eval_seed=1, positions=1,
                 kept=None):
    sizes = np.array([len(d) for d in documents])
    lines = ListDataset([torch.tensor(d, dtype=torch.long) for d in documents], sizes)
    return BidirectionalEvalDataset(lines, sizes, mode, list(r_values), suffix_fraction,
                                    eval_seed, MASK, PAD, SPECIALS, positions_per_document=positions,
                                    kept_documents=kept)


def items_by_document(dataset):
    """``{(document, group): item}`` with each (document, group) exactly once."""
    items = {}
    for index in range(len(dataset)):
        item = dataset[index]
        key = (int(dataset.item_document[index]), item["group"])
        assert key not in items and item["id"] == index
        items[key] = item
    return items


def assert_item(item, source, positions, target, n_bidir):
    n = len(source)
    assert item["source"].tolist() == source
    assert item["positions"].tolist() == positions
    assert item["target"].tolist() == target
    assert item["doc_ids"].tolist() == [0] * n
    assert item["bidir_lens"].tolist() == [n_bidir] * n


def test_suffix_ppl_items_by_hand():
    dataset = eval_dataset(HAND_DOCUMENTS, "suffix_ppl", [0, 0.25, 1], suffix_fraction=0.5)
    assert (dataset.scored, dataset.skipped) == (4, 1) and len(dataset) == 12
    assert dataset.group_labels == ["r0", "r0.25", "r1"]
    items = items_by_document(dataset)
    assert sorted(items) == [(d, g) for d in (0, 2, 3, 4) for g in range(3)]
    for group, r_bidir in enumerate([0, 0.25, 1]):
        # n = 5: n_suffix = round(2.5) = 3, n_prefix = 2: C, D, </s> from A B / A B C / A B C D
        assert_item(items[0, group], [A, B, C, D, EOS], [0, 1, 2, 3, 4], [P, C, D, EOS, P],
                    {0: 0, 0.25: 1, 1: 2}[r_bidir])  # 0.25 x 2 = 0.5 -> 1
        # n = 2: n_suffix = 1, n_prefix = 1: </s> from the first token
        assert_item(items[2, group], [A, EOS], [0, 1], [EOS, P], {0: 0, 0.25: 0, 1: 1}[r_bidir])
        assert_item(items[3, group], [UNK, EOS], [0, 1], [EOS, P], {0: 0, 0.25: 0, 1: 1}[r_bidir])
        # n = 7: n_suffix = round(3.5) = 4, n_prefix = 3
        assert_item(items[4, group], [C, MADEUP, D, E, F, A, EOS], list(range(7)),
                    [P, P, E, F, A, EOS, P], {0: 0, 0.25: 1, 1: 3}[r_bidir])


def test_full_doc_ppl_items_by_hand_have_one_group():
    dataset = eval_dataset(HAND_DOCUMENTS, "full_doc_ppl", [0.5, 1])  # R is ignored
    assert (dataset.scored, dataset.skipped, len(dataset)) == (4, 1, 4)
    assert dataset.group_labels == ["full"]
    items = items_by_document(dataset)
    assert sorted(items) == [(0, 0), (2, 0), (3, 0), (4, 0)]
    assert_item(items[0, 0], [A, B, C, D, EOS], [0, 1, 2, 3, 4], [B, C, D, EOS, P], 0)
    assert_item(items[2, 0], [A, EOS], [0, 1], [EOS, P], 0)
    assert_item(items[3, 0], [UNK, EOS], [0, 1], [EOS, P], 0)
    assert_item(items[4, 0], [C, MADEUP, D, E, F, A, EOS], list(range(7)),
                [MADEUP, D, E, F, A, EOS, P], 0)
    batch = dataset.collater([dataset[i] for i in range(len(dataset))])
    assert batch["eval_group"].tolist() == [0, 0, 0, 0]


def spec_infill_positions(tokens, document, eval_seed, count=1):
    """``infill_positions``'s rule: ``count`` positions uniformly without replacement among the
    non-special positions, one ``integers(remaining)`` draw after the other from
    ``numpy.random.default_rng((eval_seed, document))``."""
    candidates = [p for p, token in enumerate(tokens) if token not in SPECIALS]
    rng = np.random.default_rng((eval_seed, document))
    return [candidates.pop(int(rng.integers(len(candidates))))
            for _ in range(min(count, len(candidates)))]


def test_infill_items_by_hand():
    dataset = eval_dataset(HAND_DOCUMENTS, "infill", [0.5, 1], eval_seed=7)
    # [</s>] and [<unk>, </s>] have no token to infill
    assert (dataset.scored, dataset.skipped, len(dataset)) == (3, 2, 6)
    items = items_by_document(dataset)
    assert sorted(items) == [(d, g) for d in (0, 2, 4) for g in range(2)]
    for document in (0, 2, 4):
        tokens = HAND_DOCUMENTS[document]
        n, p = len(tokens), spec_infill_positions(tokens, document, 7)[0]
        assert p in {0: [0, 1, 2, 3], 2: [0], 4: [0, 2, 3, 4, 5]}[document]
        kept = [q for q in range(n) if q != p]
        for group, r_bidir in enumerate([0.5, 1]):
            assert_item(items[document, group], [tokens[q] for q in kept] + [MASK], kept + [p],
                        [P] * (n - 1) + [tokens[p]], half_up(r_bidir, n))
    # the 2-token document: its only word is masked; n_bidir = round(0.5 x 2) = 1
    assert_item(items[2, 0], [EOS, MASK], [1, 0], [P, A], 1)


def test_collater_by_hand():
    dataset = eval_dataset(HAND_DOCUMENTS, "suffix_ppl", [0, 1], suffix_fraction=0.5)
    indices = [index for index in range(len(dataset))
               if int(dataset.item_document[index]) in (2, 4)]  # n = 2 and 7, groups 0 and 1
    batch = dataset.collater([dataset[i] for i in indices])
    assert batch["id"].tolist() == indices and batch["nsentences"] == 4
    assert batch["ntokens"] == 2 + 2 + 7 + 7
    net = batch["net_input"]
    short = [A, EOS] + [P] * 5
    long = [C, MADEUP, D, E, F, A, EOS]
    assert net["src_tokens"].tolist() == [short, short, long, long]
    assert net["src_lengths"].tolist() == [2, 2, 7, 7]
    assert net["src_positions"].tolist() == [[0, 1] + [0] * 5] * 2 + [list(range(7))] * 2
    assert net["doc_ids"].tolist() == [[0, 0] + [-1] * 5] * 2 + [[0] * 7] * 2
    assert net["bidir_lens"].tolist() == [[0, 0] + [0] * 5, [1, 1] + [0] * 5, [0] * 7, [3] * 7]
    assert batch["target"].tolist() == [[EOS] + [P] * 6] * 2 + [[P, P, E, F, A, EOS, P]] * 2
    assert batch["eval_group"].tolist() == [0, 1, 0, 1]
    assert dataset.collater([]) == {}


def random_documents(rng, count, low, high, special_rate=0.0):
    """``count`` documents of ``low..high`` tokens ending in ``</s>``, words drawn from w0..w39
    (w0 about 40% of them), specials (<unk>, a madeupword, </s>) at ``special_rate``."""
    documents = []
    for n in rng.integers(low, high + 1, size=count):
        words = np.where(rng.random(n - 1) < 0.4, W[0], rng.choice(WORD_IDS, n - 1))
        specials = rng.choice([UNK, MADEUP, EOS], n - 1)
        body = np.where(rng.random(n - 1) < special_rate, specials, words)
        documents.append([int(t) for t in body] + [EOS])
    return documents


def masked_positions(dataset):
    """``{document: {group: masked original position}}`` read off the items."""
    found = {}
    for index in range(len(dataset)):
        item = dataset[index]
        slots = (item["source"] == MASK).nonzero().flatten().tolist()
        assert slots == [len(item["source"]) - 1]  # one <mask>, at the end
        document = int(dataset.item_document[index])
        found.setdefault(document, {})[item["group"]] = int(item["positions"][-1])
    return found


def test_infill_positions_are_fixed_per_seed_and_document():
    rng = np.random.default_rng(3)
    documents = random_documents(rng, 40, 1, 20, special_rate=0.3) + [[UNK, MADEUP, EOS]]
    first = masked_positions(eval_dataset(documents, "infill", [0, 0.5, 1], eval_seed=5))
    again = masked_positions(eval_dataset(documents, "infill", [0.25], eval_seed=5))
    other_seed = masked_positions(eval_dataset(documents, "infill", [0, 0.5, 1], eval_seed=6))
    scorable = [d for d, doc in enumerate(documents) if set(doc) - set(SPECIALS)]
    assert sorted(first) == sorted(again) == sorted(other_seed) == scorable
    assert len(scorable) < len(documents)  # some documents were only specials
    for document in scorable:
        positions = set(first[document].values())
        assert len(first[document]) == 3 and len(positions) == 1  # the same for every R
        (position,) = positions
        assert position == again[document][0]  # and across dataset instances
        assert position == spec_infill_positions(documents[document], document, 5)[0]
        assert documents[document][position] not in SPECIALS
        assert documents[document][other_seed[document][0]] not in SPECIALS
    assert any(first[d][0] != other_seed[d][0] for d in scorable)


def test_infill_position_is_uniform_over_seeds():
    document = [A, UNK, B, C, EOS, D, MADEUP, E, EOS]  # words at 0, 2, 3, 5, 7
    counts = {p: 0 for p in (0, 2, 3, 5, 7)}
    for seed in range(2000):
        counts[eval_dataset([document], "infill", [0], eval_seed=seed).infill_positions[0][0]] += 1
    expected = 2000 / 5
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    assert chi2 < 18.47  # chi-square, 4 degrees of freedom, p = 0.001


def test_k_infill_positions_per_document_by_hand():
    """--infill-positions 3: each document's positions drawn one after the other without
    replacement, each in a row of its own with one <mask>; a document with fewer non-special
    tokens gives them all; the first position is K = 1's."""
    dataset = eval_dataset(HAND_DOCUMENTS, "infill", [0, 1], eval_seed=7, positions=3)
    single = eval_dataset(HAND_DOCUMENTS, "infill", [0, 1], eval_seed=7)
    expected = {d: spec_infill_positions(HAND_DOCUMENTS[d], d, 7, 3) for d in (0, 2, 4)}
    assert [len(expected[d]) for d in (0, 2, 4)] == [3, 1, 3]  # document 2 has one word
    assert dataset.infill_positions == expected
    assert all(dataset.infill_positions[d][:1] == single.infill_positions[d] for d in expected)
    assert (dataset.scored, dataset.skipped, dataset.rows_per_group, len(dataset)) == (3, 2, 7, 14)
    rows = {}
    for index in range(len(dataset)):
        item = dataset[index]
        document, position = item["document"], item["position"]
        tokens, n = HAND_DOCUMENTS[document], len(HAND_DOCUMENTS[document])
        kept = [q for q in range(n) if q != position]
        assert_item(item, [tokens[q] for q in kept] + [MASK], kept + [position],
                    [P] * (n - 1) + [tokens[position]], half_up([0, 1][item["group"]], n))
        rows.setdefault(document, []).append((position, item["group"]))
    assert {d: sorted(r) for d, r in rows.items()} == \
        {d: sorted((p, g) for p in expected[d] for g in (0, 1)) for d in expected}
    batch = dataset.collater([dataset[i] for i in range(4)])
    assert batch["eval_document"].tolist() == [int(dataset.item_document[i]) for i in range(4)]
    assert batch["eval_position"].tolist() == [int(dataset.item_position[i]) for i in range(4)]
    assert batch["eval_split"] == "valid"


@pytest.mark.parametrize("mode, r_values", [("infill", [0, 1]), ("suffix_ppl", [0.5]),
                                             ("full_doc_ppl", [])])
def test_kept_documents_score_their_whole_split_rows(mode, r_values):
    """kept_documents (--eval-max-documents): exactly the rows the whole split's dataset has
    for those documents, item for item; the too-short kept ones counted as skipped."""
    whole = eval_dataset(HAND_DOCUMENTS, mode, r_values, eval_seed=7, positions=2)
    kept = [1, 3, 4]  # 1 and 3 are too short for infill (3 holds only specials)
    subset = eval_dataset(HAND_DOCUMENTS, mode, r_values, eval_seed=7, positions=2, kept=kept)

    def rows(dataset):
        return {(int(dataset.item_document[i]), int(dataset.item_position[i]),
                 int(dataset.item_group[i])): dataset[i] for i in range(len(dataset))}
    whole_rows, subset_rows = rows(whole), rows(subset)
    assert set(subset_rows) == {key for key in whole_rows if key[0] in kept}
    for key, item in subset_rows.items():
        for field in ("source", "positions", "target", "bidir_lens"):
            assert torch.equal(item[field], whole_rows[key][field]), (key, field)
    short = [d for d in kept if (sum(t not in SPECIALS for t in HAND_DOCUMENTS[d]) == 0
                                 if mode == "infill" else len(HAND_DOCUMENTS[d]) < 2)]
    assert (subset.considered, subset.skipped, subset.scored) == (3, len(short), 3 - len(short))
    with pytest.raises(ValueError, match="kept_documents must index the 5 documents"):
        eval_dataset(HAND_DOCUMENTS, mode, r_values, kept=[0, 5])


def test_positions_are_nested_in_k_and_cover_the_document():
    rng = np.random.default_rng(5)
    documents = random_documents(rng, 30, 2, 25, special_rate=0.2)
    by_k = {k: eval_dataset(documents, "infill", [1], eval_seed=3, positions=k).infill_positions
            for k in (1, 4, 100)}
    for document, everything in by_k[100].items():
        words = [p for p, t in enumerate(documents[document]) if t not in SPECIALS]
        assert sorted(everything) == words  # K >= the words: every word once
        assert by_k[4][document] == everything[:4] and by_k[1][document] == everything[:1]


# --- 3. metrics by hand on a tiny model ----------------------------------------------------------

def eval_task(data, mode, r_bidir=None, document_format=BLANK_LINE_SEPARATED, **overrides):
    cfg = BidirectionalLMConfig(data=str(data), seed=1, tokens_per_sample=TOKENS_PER_SAMPLE,
                                eval_mode=mode, r_bidir=r_bidir, document_format=document_format,
                                **overrides)
    task = BidirectionalLMTask.setup_task(cfg)
    task.load_dataset("valid", combine=False)
    return task


def split_documents(lines, document_format=BLANK_LINE_SEPARATED):
    """The documents of a split (reference_documents at --tokens-per-sample)."""
    return reference_documents(lines, document_format, TOKENS_PER_SAMPLE)


def special_ids_of(dictionary):
    return sorted({i for i, s in enumerate(dictionary.symbols)
                   if i < 4 or s == "<mask>" or s.startswith("madeupword")})


def log_probs(model, inputs, positions=None, n_bidir=None):
    """Log-probabilities ``(n, V)`` (float64) of one document run on its own: causally with the
    model's default layout, or with ``positions`` and ``bidir_lens = n_bidir`` set by hand."""
    tokens = torch.tensor([inputs])
    with torch.no_grad():
        if positions is None:
            logits = model(tokens)[0][0]
        else:
            n = len(inputs)
            logits = model(tokens, src_positions=torch.tensor([positions]),
                           doc_ids=torch.zeros(1, n, dtype=torch.long),
                           bidir_lens=torch.full((1, n), n_bidir))[0][0]
    return torch.log_softmax(logits.double(), dim=-1)


def hand_full_doc(model, documents):
    """Summed -ln p(x_{t+1} | x_<=t) over every document (causal), tokens, documents."""
    rows = []
    for document, doc in enumerate(documents):
        if len(doc) < 2:
            continue
        lp = log_probs(model, doc)
        rows.append((document, -sum(float(lp[t, doc[t + 1]]) for t in range(len(doc) - 1)),
                     len(doc) - 1))
    return hand_totals(rows)


def hand_suffix(model, documents, r_bidir, fraction):
    rows = []
    for document, doc in enumerate(documents):
        n = len(doc)
        if n < 2:
            continue
        n_suffix = min(max(half_up(fraction, n), 1), n - 1)
        n_prefix = n - n_suffix
        lp = log_probs(model, doc, list(range(n)), half_up(r_bidir, n_prefix))
        rows.append((document, -sum(float(lp[t, doc[t + 1]]) for t in range(n_prefix - 1, n - 1)),
                     n_suffix))
    return hand_totals(rows)


def hand_totals(rows, correct=None):
    """Sums over scored rows ``(document, nats, tokens)`` (and ``correct`` 0/1 per row), with
    the standard errors written out from their definitions (not from the package's formulas):
    the loss as a ratio of means over documents, linearised (delta method), and the binomial
    error of accuracy."""
    nats = np.array([row[1] for row in rows])
    tokens = np.array([row[2] for row in rows], dtype=np.float64)
    mean_loss = nats.sum() / tokens.sum()
    linearised = (nats - mean_loss * tokens) / tokens.mean()  # d(mean l / mean n)
    loss_se = linearised.std(ddof=1) / math.sqrt(len(rows))
    hand = {"loss": float(nats.sum()), "n": int(tokens.sum()), "docs": len(rows), "rows": rows,
            "loss_se_bits": loss_se / math.log(2), "ppl_se": math.exp(mean_loss) * loss_se}
    if correct is not None:
        share = float(np.mean(correct))
        hand["correct"] = int(np.sum(correct))
        hand["acc_se"] = 100 * math.sqrt(share * (1 - share) / len(correct))
    return hand


def hand_infill(model, documents, r_bidir, eval_seed, specials, positions=1):
    """Masked-token loss and argmax accuracy (over the vocabulary without ``specials``) of each
    document's ``positions`` infill positions (each a row: ``(document, nats, 1, position,
    correct)``); also how often the unrestricted argmax was a special token, and the smallest
    margin between the two best non-special logits."""
    rows, correct, special_argmax, margin = [], [], 0, math.inf
    for document, doc in enumerate(documents):
        for p in spec_infill_positions(doc, document, eval_seed, positions):
            n, kept = len(doc), [q for q in range(len(doc)) if q != p]
            lp = log_probs(model, [doc[q] for q in kept] + [MASK], kept + [p],
                           half_up(r_bidir, n))[-1]
            words = lp.clone()
            words[specials] = -math.inf
            top2 = torch.topk(words, 2).values
            margin = min(margin, float(top2[0] - top2[1]))
            correct.append(int(int(words.argmax()) == doc[p]))
            special_argmax += int(int(lp.argmax()) in specials)
            rows.append((document, -float(lp[doc[p]]), 1, p, correct[-1]))
    hand = hand_totals(rows, correct)
    hand.update(special_argmax=special_argmax, margin=margin)
    return hand


def run_criterion(task, model, batch_size=5):
    """The criterion over the evaluation batches as fairseq-validate forms them (through the
    task's ``valid_step``), reduced by the task; ``(logging outputs, smoothed metrics)``."""
    criterion = BidirectionalLmLoss(MaskedLmConfig(tpu=False), task)
    dataset = task.dataset("valid")
    iterator = task.get_batch_iterator(dataset, max_sentences=batch_size,
                                       max_positions=TOKENS_PER_SAMPLE, seed=1)
    logs = []
    model.eval()
    for batch in iterator.next_epoch_itr(shuffle=False):
        logs.append(task.valid_step(batch, model, criterion)[2])
        assert "eval_rows" not in logs[-1]  # the task keeps the per-row scores to itself
    with metrics.aggregate() as aggregated:
        task.reduce_metrics(logs, criterion)
    return logs, aggregated.get_smoothed_values()


LINE = re.compile(r"(?P<mode>\w+)(?: \| r_bidir (?P<r>[\d.]+))? \| (?:documents|positions) "
                  r"(?P<docs>\d+) \| tokens (?P<n>\d+) \| loss (?P<loss>[-\d.]+|nan) ± "
                  r"(?P<loss_se>[\d.]+|nan) \| ppl (?P<ppl>[-\d.]+|nan|inf) ± (?P<ppl_se>[\d.]+|nan|inf)"
                  r"(?: \| accuracy (?P<acc>[\d.]+) ± (?P<acc_se>[\d.]+|nan))? \(± 1 standard error")


def parse_report(text):
    """``{(mode, r or None): fields}`` of the report lines found in ``text``."""
    found = {}
    for line in text.splitlines():
        match = LINE.search(line)
        if match:
            key = (match["mode"], match["r"])
            assert key not in found, f"two lines for {key}"
            found[key] = match.groupdict()
    return found


def assert_line(fields, hand):
    """A printed line against a hand computation (loss printed to 3 decimals, ppl to 2)."""
    assert int(fields["docs"]) == hand["docs"] and int(fields["n"]) == hand["n"]
    loss = hand["loss"] / hand["n"] / math.log(2)
    assert float(fields["loss"]) == pytest.approx(loss, abs=6e-4)
    assert float(fields["ppl"]) == pytest.approx(2 ** loss, abs=6e-3, rel=2e-4)
    assert float(fields["loss_se"]) == pytest.approx(hand["loss_se_bits"], abs=6e-4)
    assert float(fields["ppl_se"]) == pytest.approx(hand["ppl_se"], abs=6e-3, rel=2e-4)
    if "correct" in hand:
        assert float(fields["acc"]) == pytest.approx(100 * hand["correct"] / hand["n"], abs=6e-3)
        assert float(fields["acc_se"]) == pytest.approx(hand["acc_se"], abs=6e-3)


def assert_stats(stats, hand):
    """The criterion's summed per-group statistics against the hand sums (float32 forward
    batched and padded vs one document at a time)."""
    assert stats["loss"] == pytest.approx(hand["loss"], rel=2e-5)
    assert int(stats["rows"]) == hand["docs"]
    for key in ("n", "correct"):
        if key in hand:
            assert int(stats[key]) == hand[key], key


def assert_errors(values, name, hand):
    """The logged ``<name>_se`` metrics against the hand standard errors."""
    assert values[f"{name}_se".replace("ppl", "loss", 1)] == pytest.approx(hand["loss_se_bits"],
                                                                          abs=6e-4)
    assert values[f"{name}_se"] == pytest.approx(hand["ppl_se"], abs=6e-3, rel=2e-4)


@pytest.fixture(scope="module")
def metric_bin(tmp_path_factory):
    """A data-bin whose valid split holds ordinary lines, empty lines (``</s>`` alone; a
    document boundary by default), a line of specials only between two empty lines (a document
    with nothing to infill), a line longer than --tokens-per-sample (two pieces) and a document
    of many lines (several pieces of whole lines)."""
    rng = np.random.default_rng(11)
    lines = (random_documents(rng, 14, 2, 30) + [[EOS], [UNK, EOS], [EOS]]
             + random_documents(rng, 1, 100, 100) + random_documents(rng, 3, 3, 12) + [[EOS]]
             + random_documents(rng, 2, 2, 6))
    return write_data_bin(tmp_path_factory.mktemp("eval_bin"), {"valid": lines},
                          padded_dictionary()), lines


@pytest.fixture(params=DOCUMENT_FORMATS)
def metric_data(request, metric_bin):
    """``(data, documents, document_format)`` for each --document-format."""
    data, lines = metric_bin
    return data, split_documents(lines, request.param), request.param


def biased_tiny_model(task):
    """A random tiny model (fixed seed), nudged so that its argmax is informative: a bias on the
    final layer norm aligned with a madeupword (the unrestricted argmax is then that special)
    and, less, with the frequent word w0 (the best word is then w0, right 40% of the time),
    its weight scaled down so that the context moves the logits less than the bias does (but
    still moves them: R and the context change every score)."""
    model, _ = tiny_model(task=task, seed=0)
    decoder = model.decoder
    with torch.no_grad():
        direction = torch.randn(decoder.layer_norm.bias.shape, generator=torch.Generator().manual_seed(1))
        direction /= direction.norm()
        decoder.layer_norm.weight.mul_(0.3)
        decoder.layer_norm.bias.copy_(2.0 * direction)
        decoder.embed_tokens.weight[MADEUP] += 3.0 * direction
        decoder.embed_tokens.weight[W[0]] += 1.5 * direction
    return model


def test_task_serves_the_eval_dataset_for_validation_splits_only(metric_data):
    data, documents, document_format = metric_data
    task = eval_task(data, "suffix_ppl", "0,1", document_format)
    dataset = task.dataset("valid")
    assert isinstance(dataset, BidirectionalEvalDataset)
    assert [dataset.documents[i].tolist() for i in range(len(dataset.documents))] == documents
    assert dataset.scored + dataset.skipped == len(documents)
    # one document per line: the three empty lines are 1-token documents; by default none
    assert dataset.skipped == sum(len(d) < 2 for d in documents) == \
        {LINES: 3, BLANK_LINE_SEPARATED: 0}[document_format]
    if document_format == BLANK_LINE_SEPARATED:
        assert len(documents) < 10 and sum(doc.count(EOS) > 1 for doc in documents) >= 3
    # what fairseq-train loads for training (combine=True) keeps the training objective
    task.load_dataset("valid", combine=True)
    assert isinstance(task.dataset("valid"), BidirectionalLMDataset)
    assert task.special_token_ids() == SPECIALS == special_ids_of(task.source_dictionary)
    assert task.eval_group_labels == ["r0", "r1"]
    assert eval_task(data, "full_doc_ppl").eval_group_labels == ["full"]


def test_full_doc_ppl_by_hand(metric_data, caplog):
    data, documents, document_format = metric_data
    task = eval_task(data, "full_doc_ppl", document_format=document_format)
    model = biased_tiny_model(task)
    with caplog.at_level("INFO"):
        logs, values = run_criterion(task, model)
    hand = hand_full_doc(model, documents)
    assert hand["docs"] == sum(len(d) >= 2 for d in documents)  # not the empty lines
    (((mode, label), stats),) = evaluation_stats(logs).items()
    assert (mode, label) == ("full_doc_ppl", "full")
    assert_stats(stats, hand)
    loss = hand["loss"] / hand["n"] / math.log(2)
    assert values["loss"] == pytest.approx(loss, abs=6e-4)
    assert values["ppl"] == pytest.approx(2 ** loss, abs=6e-3, rel=2e-4)
    assert_errors(values, "ppl", hand)
    assert 0 < hand["ppl_se"] < values["ppl"]  # finite and positive: there is noise
    assert values["documents"] == hand["docs"] == values["bsz"]
    assert sum(int(log["sample_size"]) for log in logs) == hand["n"]
    (line,) = evaluation_report_lines(logs)
    assert line.startswith("full_doc_ppl | documents ")
    assert_line(parse_report(line)[("full_doc_ppl", None)], hand)
    assert parse_report(caplog.text).keys() == {("full_doc_ppl", None)}  # logged by the task


@pytest.mark.parametrize("fraction", [0.2, 0.5])
def test_suffix_ppl_per_r_by_hand(metric_data, fraction):
    data, documents, document_format = metric_data
    r_values = ["0", "0.25", "0.5", "0.75", "1"]
    task = eval_task(data, "suffix_ppl", ",".join(r_values), document_format,
                     suffix_fraction=fraction)
    model = biased_tiny_model(task)
    logs, values = run_criterion(task, model, batch_size=7)
    stats = evaluation_stats(logs)
    assert list(stats) == [("suffix_ppl", f"r{r}") for r in r_values]
    lines = evaluation_report_lines(logs)
    assert len(lines) == len(r_values)
    report = parse_report("\n".join(lines))
    hands = {}
    for r in r_values:
        hand = hands[r] = hand_suffix(model, documents, float(r), fraction)
        assert_stats(stats["suffix_ppl", f"r{r}"], hand)
        loss = hand["loss"] / hand["n"] / math.log(2)
        assert values[f"suffix_loss_r{r}"] == pytest.approx(loss, abs=6e-4)
        assert values[f"suffix_ppl_r{r}"] == pytest.approx(2 ** loss, abs=6e-3, rel=2e-4)
        assert_errors(values, f"suffix_ppl_r{r}", hand)
        assert_line(report["suffix_ppl", r], hand)
    assert len({round(h["loss"], 6) for h in hands.values()}) > 1  # R changes the scores
    assert values["bsz"] == len(r_values) * hands["0"]["docs"]
    total = sum(h["loss"] for h in hands.values()) / sum(h["n"] for h in hands.values())
    assert values["loss"] == pytest.approx(total / math.log(2), abs=6e-4)


@pytest.mark.parametrize("positions", [1, 3])
def test_infill_per_r_by_hand(metric_data, caplog, positions):
    data, documents, document_format = metric_data
    task = eval_task(data, "infill", "0,0.5,1", document_format, eval_seed=4,
                     infill_positions=positions)
    model = biased_tiny_model(task)
    with caplog.at_level("INFO"):
        logs, values = run_criterion(task, model, batch_size=4)
    stats = evaluation_stats(logs)
    report = parse_report(caplog.text)
    assert set(report) == {("infill", r) for r in ("0", "0.5", "1")}
    words = [sum(t not in SPECIALS for t in doc) for doc in documents]
    for r in ("0", "0.5", "1"):
        hand = hand_infill(model, documents, float(r), 4, SPECIALS, positions)
        assert hand["margin"] > 1e-3  # no near-tie the batched forward could flip
        assert hand["docs"] == sum(min(w, positions) for w in words)  # rows: positions
        assert values[f"positions_r{r}"] == hand["docs"]
        assert values[f"infill_acc_r{r}_se"] == pytest.approx(hand["acc_se"], abs=6e-3)
        assert_errors(values, f"infill_ppl_r{r}", hand)
        # the test means something: the right word is sometimes the argmax, and the argmax over
        # the whole vocabulary is sometimes a special token
        assert 0 < hand["correct"] < hand["n"] and hand["special_argmax"] > 0
        assert_stats(stats["infill", f"r{r}"], hand)
        loss = hand["loss"] / hand["n"] / math.log(2)
        assert values[f"infill_acc_r{r}"] == pytest.approx(100 * hand["correct"] / hand["n"],
                                                           abs=6e-3)
        assert values[f"infill_loss_r{r}"] == pytest.approx(loss, abs=6e-4)
        assert values[f"infill_ppl_r{r}"] == pytest.approx(2 ** loss, abs=6e-3, rel=2e-4)
        assert_line(report["infill", r], hand)
    assert values["bsz"] == 3 * sum(min(w, positions) for w in words)


def test_report_lines_only_outside_training(metric_data, caplog):
    data, _, document_format = metric_data
    task = eval_task(data, "suffix_ppl", "0.5", document_format)
    model = biased_tiny_model(task)
    task.begin_valid_epoch(1, model)  # fairseq-train's validation
    with caplog.at_level("INFO"):
        logs, values = run_criterion(task, model)
    assert "suffix_loss_r0.5" in values and not parse_report(caplog.text)


def assert_score_rows(rows, hand_rows, label, infill):
    """The scores file's rows of group ``label`` (``rows``: :func:`read_eval_scores`'s) are the
    hand computation's rows (``(document, loss, tokens, position, correct)``), one for one."""
    expected = {("valid", row[0], row[3] if infill else -1, label): row for row in hand_rows}
    got = {key: row for key, row in rows.items() if key[3] == label}
    assert got.keys() == expected.keys()
    for key, row in got.items():
        assert row["loss"] == pytest.approx(expected[key][1], rel=2e-5, abs=1e-5)
        assert row["tokens"] == expected[key][2]
        assert row["correct"] == (expected[key][4] if infill else None)


@pytest.mark.parametrize("mode, r_bidir", [("full_doc_ppl", None), ("suffix_ppl", "0,1"),
                                           ("infill", "0,1")])
def test_eval_scores_out_lists_every_row_by_hand(metric_bin, tmp_path, mode, r_bidir):
    """--eval-scores-out: one JSON line per scored row (document, position, R, tokens, loss in
    nats, correct), equal to the hand computation row by row; an existing file is refused when
    the config is read."""
    data, lines = metric_bin
    documents = split_documents(lines)
    path = tmp_path / "scores.jsonl"
    task = eval_task(data, mode, r_bidir, eval_seed=4, eval_scores_out=str(path),
                     **({"infill_positions": 2} if mode == "infill" else {}))
    model = biased_tiny_model(task)
    run_criterion(task, model, batch_size=3)
    settings, rows = read_eval_scores(path)
    assert settings["eval_mode"] == mode and settings["document_format"] == BLANK_LINE_SEPARATED
    labels = ["full"] if mode == "full_doc_ppl" else ["r0", "r1"]
    assert {key[3] for key in rows} == set(labels)
    for label in labels:
        r = 0.0 if label == "full" else float(label[1:])
        hand = {"full_doc_ppl": lambda: hand_full_doc(model, documents),
                "suffix_ppl": lambda: hand_suffix(model, documents, r, 0.2),
                "infill": lambda: hand_infill(model, documents, r, 4, SPECIALS, 2)}[mode]()
        assert_score_rows(rows, hand["rows"], label, mode == "infill")
    with pytest.raises(ValueError, match=f"--eval-scores-out {path} exists; remove it"):
        eval_task(data, mode, r_bidir, eval_scores_out=str(path))


@pytest.mark.parametrize("overrides, message", [
    (dict(eval_mode="suffix_ppl", r_bidir="0", infill_positions=4),
     "--infill-positions 4 belongs to --eval-mode infill"),
    (dict(eval_mode="infill", r_bidir="0", infill_positions=0),
     "--infill-positions 0 must be at least 1"),
    (dict(eval_scores_out="scores.jsonl"), "--eval-scores-out scores.jsonl needs --eval-mode"),
    (dict(eval_mode="full_doc_ppl", eval_max_documents=-1),
     "--eval-max-documents -1 must be 0 .every document. or the number of documents"),
    (dict(eval_max_documents=5), "--eval-max-documents 5 needs --eval-mode"),
    (dict(eval_mode="full_doc_ppl", eval_scores_out="/no/such/dir/s.jsonl"),
     "the directory /no/such/dir does not exist"),
])
def test_evaluation_flags_are_checked_at_setup(overrides, message):
    with pytest.raises(ValueError, match=message):
        BidirectionalLMTask.setup_task(BidirectionalLMConfig(data="unused", seed=1, **overrides))


# --- 4. end to end: fairseq-train, then fairseq-validate -----------------------------------------
#
# One module fixture trains every checkpoint once and runs every fairseq-validate command (the
# CLIs' start-up dominates, so they run side by side, each on one thread); one test then checks
# them all and reports every failed check, so that pytest-xdist cannot spread the work over
# several workers, each training again.

TRAIN_FLAGS = ["--arch", "bidir_lm_tiny", "--tokens-per-sample", str(TOKENS_PER_SAMPLE),
               "--max-tokens", "512", "--optimizer", "adam", "--lr", "3e-3", "--log-format",
               "json", "--no-progress-bar", "--cpu", "--num-workers", "0", "--seed", "3",
               "--no-epoch-checkpoints", "--disable-validation"]
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
#: variant: updates (nxt_uni and msk_bi only serve the errors)
TRAINED_VARIANTS = {"hyb_pre": 6, "nxt_uni": 1, "msk_bi": 1}
#: SCORES stands for the run's --eval-scores-out file (``<name>.scores.jsonl``).
VALIDATE_RUNS = {
    "suffix_ppl": ["--eval-mode", "suffix_ppl", "--r-bidir", "0,0.5,1", "--batch-size", "5"],
    "infill": ["--eval-mode", "infill", "--r-bidir", "0,1", "--eval-seed", "9",
               "--batch-size", "3"],
    "full_doc_ppl": ["--eval-mode", "full_doc_ppl", "--max-tokens", "256"],
    "full_doc_ppl_lines": ["--eval-mode", "full_doc_ppl", "--document-format", "lines",
                           "--max-tokens", "256"],
    "infill_k3": ["--eval-mode", "infill", "--r-bidir", "0,1", "--eval-seed", "9",
                  "--infill-positions", "3", "--batch-size", "4", "--eval-scores-out", "SCORES"],
    "infill_k3_spread": ["--eval-mode", "infill", "--r-bidir", "0,1", "--eval-seed", "9",
                         "--infill-positions", "3", "--batch-size", "4", "--eval-scores-out",
                         "SCORES", "--eval-max-documents", "4"],
}
#: name: (checkpoint, flags after --task bidirectional_lm, what the error must say)
ERROR_RUNS = {
    # no silent training-objective evaluation when the mode is forgotten
    "no_mode": ("hyb_pre", [], ["needs an evaluation mode", "--eval-mode"]),
    "infill_on_nxt_uni": ("nxt_uni", ["--eval-mode", "infill", "--r-bidir", "0"],
                          ["--eval-mode infill", "infill_rescore", "full-sequence scoring"]),
    "full_doc_on_msk_bi": ("msk_bi", ["--eval-mode", "full_doc_ppl"],
                           ["--eval-mode full_doc_ppl", "never trained to predict next tokens"]),
    "r_out_of_range": ("hyb_pre", ["--eval-mode", "suffix_ppl", "--r-bidir", "0,1.5"],
                       ["--r-bidir '0,1.5'", "1.5 is outside [0, 1]"]),
    "suffix_fraction_1": ("hyb_pre", ["--eval-mode", "suffix_ppl", "--r-bidir", "0",
                                      "--suffix-fraction", "1"],
                          ["--suffix-fraction 1.0 must lie in (0, 1)"]),
    "r_without_mode": ("hyb_pre", ["--r-bidir", "0.5"], ["--r-bidir 0.5 without --eval-mode"]),
    "positions_without_infill": ("hyb_pre", ["--eval-mode", "suffix_ppl", "--r-bidir", "0",
                                             "--infill-positions", "2"],
                                 ["--infill-positions 2 belongs to --eval-mode infill"]),
}


def run_concurrently(commands, check=True):
    """Run fairseq CLIs side by side, each single-threaded."""
    workers = max(1, min(len(commands), os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda args: run_cli(args, env=ONE_THREAD, check=check), commands))


def validate_command(data, checkpoint, *flags):
    return [fairseq_cli("fairseq-validate"), data, "--user-dir", USER_DIR, "--path", checkpoint,
            "--task", "bidirectional_lm", "--cpu", "--num-workers", "0", "--log-format", "json",
            *flags]


@pytest.fixture(scope="module")
def end_to_end(tmp_path_factory):
    """A data-bin whose splits have documents of several lines between empty lines (the
    default --document-format), a line of specials only and one longer than
    --tokens-per-sample; a checkpoint per variant of TRAINED_VARIANTS by fairseq-train; then
    every fairseq-validate run. Returns a dict: the valid documents (both formats), the hyb_pre
    model loaded in-process, the outputs of VALIDATE_RUNS, the scores file and the completed
    processes of ERROR_RUNS."""
    root = tmp_path_factory.mktemp("eval_e2e")
    rng = np.random.default_rng(21)
    valid_lines = (random_documents(rng, 12, 2, 40) + [[EOS]] + random_documents(rng, 3, 2, 8)
                   + [[EOS], [UNK, EOS], [EOS]] + random_documents(rng, 1, 90, 90) + [[EOS]])
    train_lines = with_empty_lines(random_documents(rng, 160, 2, 40), 5)
    data = write_data_bin(root / "bin", {"train": train_lines, "valid": valid_lines},
                          padded_dictionary())
    run_concurrently([[fairseq_cli("fairseq-train"), data, "--user-dir", USER_DIR,
                       "--task", "bidirectional_lm", "--criterion", "bidirectional_lm",
                       "--variant", variant, *TRAIN_FLAGS, "--max-update", str(updates),
                       "--save-dir", root / variant]
                      for variant, updates in TRAINED_VARIANTS.items()])
    checkpoints = {variant: root / variant / "checkpoint_last.pt" for variant in TRAINED_VARIANTS}
    scores = {name: root / f"{name}.scores.jsonl" for name in VALIDATE_RUNS}
    commands = [validate_command(data, checkpoints["hyb_pre"],
                                 *[str(scores[name]) if flag == "SCORES" else flag
                                   for flag in flags])
                for name, flags in VALIDATE_RUNS.items()]
    commands += [validate_command(data, checkpoints[variant], "--batch-size", "4", *flags)
                 for variant, flags, _ in ERROR_RUNS.values()]
    procs = run_concurrently(commands, check=False)
    runs = dict(zip([*VALIDATE_RUNS, *ERROR_RUNS], procs))
    for mode in VALIDATE_RUNS:
        assert runs[mode].returncode == 0, runs[mode].stderr[-3000:]
    models, _, _ = checkpoint_utils.load_model_ensemble_and_task([str(checkpoints["hyb_pre"])])
    return {"documents": split_documents(valid_lines),
            "line_documents": split_documents(valid_lines, LINES), "model": models[0].eval(),
            "outputs": {mode: runs[mode].stdout + runs[mode].stderr for mode in VALIDATE_RUNS},
            "scores": scores, "errors": {name: runs[name] for name in ERROR_RUNS}}


def final_record(output):
    records = json_log_records(output, key="valid_loss")
    assert len(records) == 1, output[-3000:]
    return {key: float(value) for key, value in records[0].items()}


def scored_and_skipped(output):
    match = re.search(r"valid: --eval-mode \w+.* on (\d+) documents(?: \([^)]*\))?, one per "
                      r"sequence; (\d+) skipped", output)
    assert match, output[-3000:]
    return int(match[1]), int(match[2])


def check_full_doc_ppl(run, documents_key="documents", name="full_doc_ppl"):
    documents, output = run[documents_key], run["outputs"][name]
    hand = hand_full_doc(run["model"], documents)
    scored, skipped = scored_and_skipped(output)
    assert (scored, skipped) == (hand["docs"], sum(len(d) < 2 for d in documents))
    record = final_record(output)
    assert record["valid_ppl_se"] == pytest.approx(hand["ppl_se"], abs=6e-3, rel=2e-4)
    loss = hand["loss"] / hand["n"] / math.log(2)
    assert record["valid_loss"] == pytest.approx(loss, abs=6e-4)
    assert record["valid_ppl"] == pytest.approx(2 ** loss, abs=6e-3, rel=2e-4)
    assert record["valid_documents"] == record["valid_bsz"] == scored
    report = parse_report(output)
    assert list(report) == [("full_doc_ppl", None)]
    assert_line(report["full_doc_ppl", None], hand)


def check_full_doc_ppl_lines(run):
    """--document-format lines on a checkpoint trained on blank-line documents: every line
    scored on its own, the four empty lines skipped."""
    assert len(run["line_documents"]) == 22  # 21 lines, the long one in two pieces
    assert len(run["documents"]) < 10
    check_full_doc_ppl(run, "line_documents", "full_doc_ppl_lines")
    assert scored_and_skipped(run["outputs"]["full_doc_ppl_lines"])[1] == 4


def check_suffix_ppl(run):
    documents, output = run["documents"], run["outputs"]["suffix_ppl"]
    record, report = final_record(output), parse_report(output)
    assert set(report) == {("suffix_ppl", r) for r in ("0", "0.5", "1")}
    scored, skipped = scored_and_skipped(output)
    assert scored + skipped == len(documents) and skipped == sum(len(d) < 2 for d in documents)
    assert record["valid_bsz"] == 3 * scored
    hands = []
    for r in ("0", "0.5", "1"):
        hand = hand_suffix(run["model"], documents, float(r), 0.2)
        hands.append(hand)
        assert hand["docs"] == scored
        loss = hand["loss"] / hand["n"] / math.log(2)
        assert record[f"valid_suffix_loss_r{r}"] == pytest.approx(loss, abs=6e-4)
        assert record[f"valid_suffix_ppl_r{r}"] == pytest.approx(2 ** loss, abs=6e-3, rel=2e-4)
        assert_line(report["suffix_ppl", r], hand)
    total = sum(h["loss"] for h in hands) / sum(h["n"] for h in hands) / math.log(2)
    assert record["valid_loss"] == pytest.approx(total, abs=6e-4)


def check_infill(run, name="infill", positions=1):
    documents, output = run["documents"], run["outputs"][name]
    record, report = final_record(output), parse_report(output)
    assert set(report) == {("infill", "0"), ("infill", "1")}
    scored, skipped = scored_and_skipped(output)
    words = [sum(t not in SPECIALS for t in doc) for doc in documents]
    assert scored + skipped == len(documents) and skipped == words.count(0) == 1  # <unk> </s>
    rows = sum(min(w, positions) for w in words)
    assert record["valid_bsz"] == 2 * rows
    for r in ("0", "1"):
        hand = hand_infill(run["model"], documents, float(r), 9, SPECIALS, positions)
        assert hand["docs"] == rows and hand["margin"] > 1e-4
        assert record[f"valid_positions_r{r}"] == rows
        assert record[f"valid_infill_acc_r{r}_se"] == pytest.approx(hand["acc_se"], abs=6e-3)
        assert hand["correct"] > 0  # the trained model gets some right (w0 is 40% of the words)
        loss = hand["loss"] / hand["n"] / math.log(2)
        assert record[f"valid_infill_acc_r{r}"] == pytest.approx(
            100 * hand["correct"] / hand["n"], abs=6e-3)
        assert record[f"valid_infill_loss_r{r}"] == pytest.approx(loss, abs=6e-4)
        assert record[f"valid_infill_ppl_r{r}"] == pytest.approx(2 ** loss, abs=6e-3, rel=2e-4)
        assert_line(report["infill", r], hand)


def check_infill_k3(run):
    """--infill-positions 3 with --eval-scores-out: three rows per document, each row in the
    scores file equal to the hand computation."""
    check_infill(run, "infill_k3", positions=3)
    settings, rows = read_eval_scores(run["scores"]["infill_k3"])
    assert settings["infill_positions"] == "3" and settings["eval_mode"] == "infill"
    assert {key[3] for key in rows} == {"r0", "r1"}
    for r in ("0", "1"):
        hand = hand_infill(run["model"], run["documents"], float(r), 9, SPECIALS, 3)
        assert_score_rows(rows, hand["rows"], f"r{r}", infill=True)


def check_infill_k3_spread(run):
    """--eval-max-documents 4: the four documents spread_indices picks of the split's, each
    with the rows (positions, losses, correct) it has in the whole split's scoring."""
    output = run["outputs"]["infill_k3_spread"]
    documents = len(run["documents"])
    kept = spread_indices(documents, 4).tolist()
    assert kept == [documents * i // 4 for i in range(4)]
    assert f"(4 of {documents} spread over the split, --eval-max-documents 4)" in output
    scored, skipped = scored_and_skipped(output)
    assert scored + skipped == 4
    settings, rows = read_eval_scores(run["scores"]["infill_k3_spread"])
    assert settings["eval_max_documents"] == "4"
    _, whole = read_eval_scores(run["scores"]["infill_k3"])
    expected = {key: row for key, row in whole.items() if key[1] in kept}
    assert rows.keys() == expected.keys() and len(rows) > 0
    for key, row in rows.items():
        assert row["correct"] == expected[key]["correct"]
        assert row["loss"] == pytest.approx(expected[key]["loss"], rel=1e-5, abs=1e-6)


def check_errors(run):
    for name, (_, _, messages) in ERROR_RUNS.items():
        proc = run["errors"][name]
        output = proc.stdout + proc.stderr
        assert proc.returncode != 0, name
        for message in messages:
            assert message in output, (name, message, output[-3000:])
        assert "valid_loss" not in output, name


@pytest.mark.slow
def test_fairseq_validate_end_to_end(end_to_end):
    """Every check of the end-to-end runs; all failures reported together."""
    failures = []
    for check in (check_full_doc_ppl, check_full_doc_ppl_lines, check_suffix_ppl, check_infill,
                  check_infill_k3, check_infill_k3_spread, check_errors):
        try:
            check(end_to_end)
        except AssertionError as error:
            failures.append(f"{check.__name__}: {error}")
    assert not failures, "\n\n".join(failures)
