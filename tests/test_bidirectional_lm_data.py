"""The data and task of generalized bidirectionality (Artetxe et al. 2022, §2, Table 1, §3.1,
Appendix A / Figure 3): fairseq_ext.data.bidirectional_lm_dataset, .bidirectional_sampling and
fairseq_ext.tasks.bidirectional_lm.

Fast tests build in-memory token blocks (fairseq's TokenBlockDataset over a ListDataset) or an
in-process data-bin; one slow test reads the fairseq-preprocess'd tiny_data_bin."""
import itertools
import math
import re

import numpy as np
import pytest
import torch
from fairseq import options, tasks
from fairseq.data import Dictionary, ListDataset, TokenBlockDataset, indexed_dataset
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

import fairseq_ext  # noqa: F401  (registers the task)
from fairseq_ext.data.bidirectional_lm_dataset import BidirectionalLMDataset, arrange_document
from fairseq_ext.data.bidirectional_sampling import (
    VARIANTS,
    DocumentObjective,
    ObjectiveSampler,
    largest_safe_n_predict,
    parse_count_expression,
)
from fairseq_ext.data.documents import (
    BLANK_LINE_SEPARATED,
    DOCUMENT_FORMATS,
    LINES,
    format_mismatch,
    read_documents,
    split_lengths,
)
from fairseq_ext.tasks.bidirectional_lm import (
    BidirectionalLMConfig,
    BidirectionalLMTask,
    objective_sampler,
)

PAD, EOS = 1, 2
WORDS = [f"w{i}" for i in range(40)]


def make_dictionary(with_mask=True) -> Dictionary:
    dictionary = Dictionary()
    for word in WORDS:
        dictionary.add_symbol(word)
    if with_mask:
        dictionary.add_symbol("<mask>")
    return dictionary


MASK = make_dictionary().index("<mask>")
FIRST_WORD = make_dictionary().index("w0")


def random_documents(rng, count, low, high):
    """``count`` documents of ``low..high`` tokens: random words, then ``</s>``."""
    return [list(rng.integers(FIRST_WORD, FIRST_WORD + len(WORDS), size=n - 1)) + [EOS]
            for n in rng.integers(low, high + 1, size=count)]


def build_dataset(lines, variant="hyb_pre", tokens_per_sample=64, break_mode="complete",
                  seed=1, epoch=1, document_format="lines", **flags):
    """The training dataset over ``lines`` (token lists, each ending in ``</s>``; ``[</s>]`` is
    an empty line), read as ``document_format`` (by default each line a document)."""
    sampler = ObjectiveSampler.from_flags(variant, **flags)
    sampler.check_targets_stay_hidden(tokens_per_sample)
    sizes = np.array([len(d) for d in lines])
    lines = ListDataset([torch.tensor(d, dtype=torch.long) for d in lines], sizes)
    docs = read_documents(lines, sizes, document_format, tokens_per_sample, PAD, EOS)
    blocks = TokenBlockDataset(docs, docs.sizes, tokens_per_sample, pad=PAD, eos=EOS,
                               break_mode=break_mode, document_sep_len=1)
    dataset = BidirectionalLMDataset(blocks, docs.sizes, sampler, mask_idx=MASK, pad_idx=PAD,
                                     seed=seed)
    dataset.set_epoch(epoch)
    return dataset


def whole_batch(dataset):
    return dataset.collater([dataset[i] for i in range(len(dataset))])


def figure_3_reference(doc, masked, n_predict, mask=MASK):
    """Appendix A / Figure 3 step by step, with lists: (inputs, positions, outputs)."""
    n = len(doc)
    inputs, outputs, positions = list(doc), list(doc[1:]) + [PAD], list(range(n))  # step 1
    for k in masked:                                                                 # step 2
        inputs[k], outputs[k] = mask, doc[k]
    order = [k for k in range(n) if k not in masked] + sorted(masked)               # step 3
    inputs, outputs, positions = ([seq[k] for k in order] for seq in (inputs, outputs, positions))
    outputs = [out if i >= n - n_predict else PAD for i, out in enumerate(outputs)]  # step 4
    return inputs, positions, outputs


def attention(doc_ids, bidir_lens, cross_document=True):
    """Reference attention rule (§2, footnote 4) on one row, ``[i][j]``: within a document,
    position ``a`` attends ``b`` (indices within the document) iff ``b <= a`` or
    ``b < n_bidir``; earlier documents of the row are visible when ``cross_document``; padding
    never."""
    length = len(doc_ids)
    start = [doc_ids.index(d) if d >= 0 else -1 for d in doc_ids]
    allowed = [[False] * length for _ in range(length)]
    for i, j in itertools.product(range(length), repeat=2):
        if doc_ids[i] < 0 or doc_ids[j] < 0:
            continue
        if doc_ids[j] != doc_ids[i]:
            allowed[i][j] = cross_document and doc_ids[j] < doc_ids[i]
        else:
            a, b = i - start[i], j - start[i]
            allowed[i][j] = b <= a or b < bidir_lens[i]
    return allowed


def with_empty_lines(lines, every):
    """``lines`` with an empty line (``</s>`` alone) after every ``every``-th: documents of
    ``every`` lines, as scripts/prepare_corpus.sh writes them."""
    return [out for index, line in enumerate(lines)
            for out in ([line, [EOS]] if index % every == every - 1 else [line])]


def reference_documents(lines, document_format, max_length):
    """fairseq_ext.data.documents's rule written plainly: lines longer than ``max_length`` cut
    into near-equal pieces (first ones longer); under ``lines`` each piece is a document; under
    ``blank_line_separated`` an empty line (``[</s>]``) ends a document and is dropped, and
    pieces are packed greedily into documents of at most ``max_length`` tokens."""
    units = []
    for line in lines:
        pieces = -(-len(line) // max_length)
        base, longer = divmod(len(line), pieces)
        start = 0
        for piece in range(pieces):
            size = base + (piece < longer)
            units.append(list(line[start:start + size]))
            start += size
    if document_format == LINES:
        return units
    documents, current = [], []
    for unit in units:
        if unit == [EOS]:
            if current:
                documents.append(current)
            current = []
            continue
        if current and len(current) + len(unit) > max_length:
            documents.append(current)
            current = []
        current = current + unit
    if current:
        documents.append(current)
    return documents


def all_row_documents(dataset):
    """Every document of every row, in row order (the order the documents were read)."""
    return [doc for index in range(len(dataset)) for doc in row_documents(dataset, index)[0]]


def row_documents(dataset, index):
    """The original documents of block ``index`` (token lists) and their draws."""
    tokens, lengths = dataset.blocks[index].tolist(), dataset.document_lengths(index)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return [tokens[s:s + n] for s, n in zip(starts, lengths)], dataset.objectives(index)


# --- 1. Figure 3 by hand --------------------------------------------------------------------------

# The document a b c d e f </s> (n = 7) with b and e (positions 1, 4) drawn for masking.
A, B, C, D, E, F = range(FIRST_WORD, FIRST_WORD + 6)
DOC = [A, B, C, D, E, F, EOS]
MASKED_INPUTS = [A, C, D, F, EOS, MASK, MASK]
MASKED_POSITIONS = [0, 2, 3, 5, 6, 1, 4]
P = PAD

#: variant: (masked positions, n_bidir, Table 1's n_predict, expected targets)
HAND_CHECKED = {
    # n_mask = 0, n_bidir = 0, n_predict = n: next tokens everywhere; </s> has none
    "nxt_uni": ([], 0, 7, [B, C, D, E, F, EOS, P]),
    # n_bidir = 3: n_predict = n - n_bidir = 4, the positions of d e f </s>
    "nxt_pre": ([], 3, 4, [P, P, P, E, F, EOS, P]),
    # n_predict = n_mask = 2: the masked b and e, at the end
    "msk_uni": ([1, 4], 0, 2, [P, P, P, P, P, B, E]),
    "msk_bi": ([1, 4], 7, 2, [P, P, P, P, P, B, E]),
    # n_predict = n: a->b, c->d, d->e, f-></s>, </s>->none, then b, e
    "hyb_uni": ([1, 4], 0, 7, [B, D, E, EOS, P, B, E]),
    # n_bidir = 3: n_predict = max(7 - 3, 2) = 4: f-></s>, </s>->none, b, e
    "hyb_pre": ([1, 4], 3, 4, [P, P, P, EOS, P, B, E]),
}


@pytest.mark.parametrize("variant", sorted(HAND_CHECKED))
def test_figure_3_by_hand(variant):
    masked, n_bidir, n_predict, expected_target = HAND_CHECKED[variant]
    # the variant's own n_predict expression gives the hand-computed value
    rule = ObjectiveSampler.from_flags(variant).n_predict
    assert rule.draw({"n": 7, "n_mask": len(masked), "n_bidir": n_bidir}, None, 0.15) == n_predict
    source, positions, target = arrange_document(np.array(DOC), np.array(masked, dtype=int),
                                                 n_predict, MASK, PAD)
    if masked:
        assert source.tolist() == MASKED_INPUTS and positions.tolist() == MASKED_POSITIONS
    else:
        assert source.tolist() == DOC and positions.tolist() == list(range(7))
    assert target.tolist() == expected_target
    assert (source.tolist(), positions.tolist(), target.tolist()) == \
        figure_3_reference(DOC, masked, n_predict)


def test_deterministic_flags_give_hand_checked_rows():
    """Through the dataset, with count expressions that draw nothing: two documents packed in a
    row, each reordered on its own, doc_ids / bidir_lens / positions per document."""
    docs = [[A, B, C, D, EOS], [E, F, EOS]]
    # prefix LM with a fixed 2-token prefix: n_predict = n - 2, the last token predicting nothing
    batch = whole_batch(build_dataset(docs, "nxt_pre", n_bidir="2", plain_lm_prob=0.0))
    net = batch["net_input"]
    assert net["src_tokens"].tolist() == [[A, B, C, D, EOS, E, F, EOS]]
    assert net["src_positions"].tolist() == [[0, 1, 2, 3, 4, 0, 1, 2]]
    assert net["doc_ids"].tolist() == [[0, 0, 0, 0, 0, 1, 1, 1]]
    assert net["bidir_lens"].tolist() == [[2] * 8]
    assert batch["target"].tolist() == [[P, P, D, EOS, P, P, P, P]]
    # every token masked, all bidirectional, masked tokens predicted: BERT-like
    batch = whole_batch(build_dataset(docs, "msk_bi", n_mask="n", plain_lm_prob=0.0))
    net = batch["net_input"]
    assert net["src_tokens"].tolist() == [[MASK] * 8]
    assert net["src_positions"].tolist() == [[0, 1, 2, 3, 4, 0, 1, 2]]
    assert net["bidir_lens"].tolist() == [[5, 5, 5, 5, 5, 3, 3, 3]]
    assert batch["target"].tolist() == [[A, B, C, D, EOS, E, F, EOS]]
    assert batch["ntokens"] == 8 and batch["nsentences"] == 1
    assert net["src_lengths"].tolist() == [8]


def test_padding_values_and_dtypes():
    docs = [[A, EOS]] * 3 + [[A, B, C, D, E, F, EOS]]
    dataset = build_dataset(docs, "nxt_uni", tokens_per_sample=7)
    batch = whole_batch(dataset)
    net = batch["net_input"]
    lengths = net["src_lengths"].tolist()
    assert sorted(lengths) == [6, 7]
    short = lengths.index(6)
    assert net["src_tokens"][short, 6] == PAD and batch["target"][short, 6] == PAD
    assert net["src_positions"][short, 6] == 0 and net["doc_ids"][short, 6] == -1
    assert net["bidir_lens"][short, 6] == 0
    for name in ("src_tokens", "src_positions", "doc_ids", "bidir_lens", "src_lengths"):
        assert net[name].dtype == torch.long
    assert batch["target"].dtype == torch.long and batch["ntokens"] == 13


# --- 2. packed rows against the reference, and targets never visible ------------------------------

CUSTOM_CONFIGS = {
    # the tight bound: the last prefix token predicts the first suffix token
    "prefix_plus_one": dict(variant="nxt_pre", n_predict="n-n_bidir+1"),
    "bound": dict(variant="hyb_pre", n_predict="max(n_mask,n-n_bidir)+1"),
    # bidirectional over every unmasked token, masked tokens causal among themselves
    "bidir_unmasked": dict(variant="hyb_pre", n_bidir="n-n_mask", n_predict="n_mask+1"),
    "heavy_masking": dict(variant="hyb_pre", mask_prob=0.5),
    "all_plain": dict(variant="hyb_pre", plain_lm_prob=1.0),
}
CONFIGS = {**{v: dict(variant=v) for v in VARIANTS}, **CUSTOM_CONFIGS}


@pytest.mark.parametrize("document_format", DOCUMENT_FORMATS)
@pytest.mark.parametrize("cross_document", [True, False])
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_rows_match_figure_3_and_no_position_sees_its_target(config, cross_document,
                                                             document_format):
    """Lines of 1-20 tokens, about 1 in 20 empty: under ``blank_line_separated`` documents of
    several lines (with the </s> of each line inside), cut where longer than a row."""
    rng = np.random.default_rng(7)
    lines = random_documents(rng, 300, 1, 20)
    dataset = build_dataset(lines, tokens_per_sample=48, document_format=document_format,
                            **CONFIGS[config])
    documents = reference_documents(lines, document_format, 48)
    assert all_row_documents(dataset) == documents  # rows hold whole documents, in order
    if document_format == BLANK_LINE_SEPARATED:
        assert sum(doc.count(EOS) > 1 for doc in documents) > len(documents) / 2
    batch = whole_batch(dataset)
    net, target = batch["net_input"], batch["target"]
    predicted_total = 0
    for row, index in enumerate(batch["id"].tolist()):
        documents, objectives = row_documents(dataset, index)
        src, pos = net["src_tokens"][row].tolist(), net["src_positions"][row].tolist()
        doc_ids, bidir = net["doc_ids"][row].tolist(), net["bidir_lens"][row].tolist()
        tgt = target[row].tolist()
        start = 0
        for d, (doc, objective) in enumerate(zip(documents, objectives)):
            n = len(doc)
            span = slice(start, start + n)
            masked = sorted(p for s, p in zip(src[span], pos[span]) if s == MASK)
            assert len(masked) == objective.n_mask
            assert (src[span], pos[span], tgt[span]) == \
                figure_3_reference(doc, masked, objective.n_predict)
            assert doc_ids[span] == [d] * n and bidir[span] == [objective.n_bidir] * n
            start += n
        assert all(value == -1 for value in doc_ids[start:])
        # never predict a token the position can see
        allowed = attention(doc_ids, bidir, cross_document)
        for i, out in enumerate(tgt):
            if out == PAD:
                continue
            predicted_total += 1
            doc = documents[doc_ids[i]]
            hidden = pos[i] if src[i] == MASK else pos[i] + 1  # original index of the target
            assert doc[hidden] == out
            for j in range(len(src)):
                if allowed[i][j]:
                    assert not (doc_ids[j] == doc_ids[i] and pos[j] == hidden and src[j] != MASK), \
                        (config, index, i, j)
    assert predicted_total > 0


def test_footnote_1_bound_is_not_enough_and_ours_is_tight():
    """n = 10, n_mask = 3, n_bidir = 6: footnote 1 allows n_predict = n - n_bidir + n_mask = 7,
    which lets position 3 (original 3) see position 4 (original 4), its target. Our bound,
    max(n_mask, n - n_bidir) + 1 = 5, keeps every target hidden for every mask placement."""
    n, n_mask, n_bidir = 10, 3, 6
    doc = list(range(FIRST_WORD, FIRST_WORD + n - 1)) + [EOS]

    def leaks(masked, n_predict):
        src, pos, tgt = figure_3_reference(doc, masked, n_predict)
        allowed = attention([0] * n, [n_bidir] * n)
        for i in range(n):
            if tgt[i] == PAD:
                continue
            hidden = pos[i] if src[i] == MASK else pos[i] + 1
            if any(allowed[i][j] and pos[j] == hidden and src[j] != MASK
                   for j in range(n)):
                return True
        return False

    assert leaks([7, 8, 9], n - n_bidir + n_mask)
    bound = largest_safe_n_predict(n, n_mask, n_bidir)
    assert bound == 5
    placements = [list(c) for c in itertools.combinations(range(n), n_mask)]
    assert not any(leaks(masked, bound) for masked in placements)
    assert any(leaks(masked, bound + 1) for masked in placements)


def test_a_leaking_draw_is_refused_at_run_time_too():
    """Setup checks cover every length; the check on each drawn document is the safety net."""
    sampler = ObjectiveSampler.from_flags("nxt_pre", n_predict="n", plain_lm_prob=0.0)
    with pytest.raises(ValueError, match=r"--n-predict 'n'.*footnote 1.*at most"):
        for _ in range(20):
            sampler.draw(10, np.random.default_rng(0))


# --- 3. statistics, fixed seeds ------------------------------------------------------------------

def chi_square_uniform(values, support):
    counts = np.array([np.sum(values == v) for v in support])
    expected = len(values) / len(support)
    return float(((counts - expected) ** 2 / expected).sum()), counts


#: 99.9% quantiles of the chi-square distribution by degrees of freedom.
CHI2_999 = {4: 18.47, 11: 31.26}


def test_n_bidir_is_uniform_on_1_to_n():
    """U(1, n) per document (not metaseq's randint(min(doc_lens, [2]*k)) + 1, a lexicographic
    min that keeps the prefix at 1 or 2 tokens)."""
    rng = np.random.default_rng(3)
    documents = [[FIRST_WORD] * (n - 1) + [EOS] for n in rng.choice([5, 12], size=6000)]
    dataset = build_dataset(documents, "nxt_pre", plain_lm_prob=0.0)
    draws = [o for i in range(len(dataset)) for o in dataset.objectives(i)]
    batch = whole_batch(dataset)
    for n in (5, 12):
        n_bidir = np.array([o.n_bidir for o in draws if o.n == n])
        assert len(n_bidir) > 2500
        statistic, counts = chi_square_uniform(n_bidir, range(1, n + 1))
        assert statistic < CHI2_999[n - 1], counts
        assert n_bidir.min() == 1 and n_bidir.max() == n
        expected = len(n_bidir) / n
        assert np.all(np.abs(counts - expected) < 5 * math.sqrt(expected)), counts
        # a value of 3 or more (never under metaseq's draw) in about (n - 2) / n of documents
        assert abs(np.mean(n_bidir >= 3) - (n - 2) / n) < 0.05
    # the batch carries the same n_bidir
    per_doc = [b for row_ids, row_bidir in zip(batch["net_input"]["doc_ids"].tolist(),
                                                batch["net_input"]["bidir_lens"].tolist())
               for c, b in enumerate(row_bidir) if row_ids[c] >= 0
               and (c == 0 or row_ids[c - 1] != row_ids[c])]
    assert sorted(per_doc) == sorted(o.n_bidir for o in draws)


def test_plain_lm_rate_and_what_plain_documents_predict():
    rng = np.random.default_rng(4)
    documents = random_documents(rng, 6000, 4, 20)
    dataset = build_dataset(documents, "hyb_pre")
    draws = [o for i in range(len(dataset)) for o in dataset.objectives(i)]
    plain = np.array([o.plain_lm for o in draws])
    assert len(draws) == 6000
    assert abs(plain.mean() - 0.1) < 5 * math.sqrt(0.1 * 0.9 / len(draws))
    # plain documents: nothing masked, no prefix, the whole document predicted (hyb_pre's
    # max(n - n_bidir, n_mask) = n); the others: U(1, n) >= 1, so bidir_lens == 0 marks plain
    assert all(o.n_mask == 0 and o.n_bidir == 0 and o.n_predict == o.n for o in draws if o.plain_lm)
    assert all(o.n_bidir >= 1 for o in draws if not o.plain_lm)
    # msk_bi: a plain document has n_predict = n_mask = 0 (footnote 5: not trained on next tokens)
    dataset = build_dataset(documents[:500], "msk_bi")
    for index in range(len(dataset)):
        item = dataset[index]
        start = 0
        for objective in dataset.objectives(index):
            span = slice(start, start + objective.n)
            if objective.plain_lm:
                assert objective.n_predict == 0 and item["bidir_lens"][span].eq(0).all()
                assert item["target"][span].eq(PAD).all() and item["source"][span].ne(MASK).all()
            start += objective.n


@pytest.mark.parametrize("p", [0.15, 0.5])
def test_n_mask_is_binomial_and_positions_uniform(p):
    n, count = 20, 5000
    documents = [[FIRST_WORD + i for i in range(n - 1)] + [EOS]] * count
    dataset = build_dataset(documents, "hyb_uni", tokens_per_sample=100, mask_prob=p,
                            plain_lm_prob=0.0)
    batch = whole_batch(dataset)
    src, pos, ids = (batch["net_input"][k] for k in ("src_tokens", "src_positions", "doc_ids"))
    is_mask = src == MASK
    # masks per document, counted from the batch
    per_document = torch.zeros(len(src), int(ids.max()) + 1, dtype=torch.long)
    per_document.scatter_add_(1, ids.clamp(min=0), is_mask.long())
    real_docs = torch.zeros_like(per_document).scatter_(1, ids.clamp(min=0), 1).bool()
    n_mask = per_document[real_docs].double()
    assert len(n_mask) == count
    mean, variance = n * p, n * p * (1 - p)
    fourth = n * p * (1 - p) * (1 + 3 * (n - 2) * p * (1 - p))  # binomial 4th central moment
    assert abs(n_mask.mean().item() - mean) < 5 * math.sqrt(variance / count)
    assert abs(n_mask.var().item() - variance) < 5 * math.sqrt((fourth - variance ** 2) / count)
    # each original position masked with probability p (uniform choice without replacement)
    per_position = torch.bincount(pos[is_mask], minlength=n).double()
    assert torch.all((per_position - count * p).abs() < 5 * math.sqrt(count * p * (1 - p)))


# --- 4. randomness is a function of (seed, epoch, index) -----------------------------------------

def test_items_depend_on_seed_epoch_and_index_only():
    documents = random_documents(np.random.default_rng(5), 200, 2, 30)
    first = build_dataset(documents, "hyb_pre", epoch=3)
    indices = list(range(len(first)))
    forward = [first[i] for i in indices]
    resumed = build_dataset(documents, "hyb_pre", epoch=3)  # a fresh process, other order
    backward = [resumed[i] for i in reversed(indices)][::-1]
    for a, b in zip(forward, backward):
        assert all(torch.equal(a[k], b[k]) for k in ("source", "positions", "target", "bidir_lens"))
    again = [first[i] for i in indices]
    assert all(torch.equal(a["source"], b["source"]) for a, b in zip(forward, again))

    def differing(other):
        return sum(not (torch.equal(a["source"], b["source"])
                        and torch.equal(a["bidir_lens"], b["bidir_lens"]))
                   for a, b in zip(forward, other))

    first.set_epoch(4)
    assert differing([first[i] for i in indices]) >= 0.9 * len(indices)
    other_seed = build_dataset(documents, "hyb_pre", epoch=3, seed=2)
    assert differing([other_seed[i] for i in indices]) >= 0.9 * len(indices)


def test_every_item_has_its_own_random_stream():
    """default_rng((seed, epoch, index)) instead of data_utils.numpy_seed, whose
    hash((seed, epoch, index)) % 1e6 gives many items the same stream."""
    dataset = build_dataset([[A, EOS]], "hyb_pre")
    count = 20000
    first_draws = {int(dataset.item_rng(index).integers(2**62)) for index in range(count)}
    assert len(first_draws) == count
    assert len({int(hash((1, 1, index)) % 1e6) for index in range(count)}) < 0.95 * count


# --- 5. documents longer than a row --------------------------------------------------------------

def test_split_lengths():
    assert split_lengths(10, 4) == [4, 3, 3]
    assert split_lengths(9, 4) == [3, 3, 3]
    assert split_lengths(8, 4) == [4, 4]
    assert split_lengths(5, 4) == [3, 2]
    assert split_lengths(4, 4) == [4]
    for size in range(1, 60):
        for limit in range(3, 12):
            pieces = split_lengths(size, limit)
            assert sum(pieces) == size and max(pieces) <= limit
            assert len(pieces) == -(-size // limit) and max(pieces) - min(pieces) <= 1
            assert len(pieces) == 1 or min(pieces) >= 2


@pytest.mark.parametrize("break_mode", ["complete", "complete_doc", "eos"])
def test_long_documents_are_split_not_truncated(break_mode):
    long_doc = list(range(FIRST_WORD + 10, FIRST_WORD + 35)) + [EOS]  # 26 tokens
    documents = [[A, EOS], long_doc, [B, C, EOS], [EOS], [D, EOS]]
    sizes = [len(d) for d in documents]
    # fairseq alone: complete mode puts the 26-token line in one over-long block
    plain_blocks = TokenBlockDataset(ListDataset([torch.tensor(d) for d in documents], sizes),
                                     sizes, 10, pad=PAD, eos=EOS, break_mode="complete")
    assert max(plain_blocks.sizes) == 26
    dataset = build_dataset(documents, "nxt_uni", tokens_per_sample=10, break_mode=break_mode)
    assert max(dataset.sizes) <= 10
    pieces = [doc for i in range(len(dataset)) for doc in row_documents(dataset, i)[0]]
    assert [len(p) for p in pieces if p[0] in long_doc[:-1]] == [9, 9, 8]
    assert sum(pieces, []) == sum((d for d in documents
                                   if not (break_mode == "complete_doc" and d == [EOS])), [])
    batch = whole_batch(dataset)
    net = batch["net_input"]
    for row in range(len(net["src_tokens"])):
        src, tgt = net["src_tokens"][row].tolist(), batch["target"][row].tolist()
        ids, pos = net["doc_ids"][row].tolist(), net["src_positions"][row].tolist()
        for c in range(len(src)):
            if ids[c] < 0:
                continue
            last_of_doc = c + 1 == len(src) or ids[c + 1] != ids[c]
            # nxt_uni: every token predicts the next one of its piece, the last one nothing
            assert tgt[c] == (PAD if last_of_doc else src[c + 1])
            assert pos[c] == (0 if c == 0 or ids[c - 1] != ids[c] else pos[c - 1] + 1)


# --- 5b. documents separated by empty lines ----------------------------------------------------

#: A data-bin split by hand: leading, repeated and trailing empty lines, a one-line document, a
#: document of two short lines, and long lines (8 and 13 tokens) in documents longer than a row.
HAND_LINES = [[EOS], [A, B, EOS], [C, EOS], [EOS], [EOS], [D, E, F, A, B, C, D, EOS], [A, EOS],
              [EOS], [B, C, D, E, F, A, B, C, D, E, F, A, EOS], [C, EOS], [EOS], [D, EOS], [EOS]]
#: Its documents at --tokens-per-sample 6, by hand: the 8-token line is cut 4 + 4 and [A </s>]
#: joins its second piece (4 + 2 <= 6); the 13-token line is cut 5 + 4 + 4 and [C </s>] joins
#: the last piece.
HAND_DOCUMENTS_6 = {
    BLANK_LINE_SEPARATED: [[A, B, EOS, C, EOS], [D, E, F, A], [B, C, D, EOS, A, EOS],
                           [B, C, D, E, F], [A, B, C, D], [E, F, A, EOS, C, EOS], [D, EOS]],
    LINES: [[EOS], [A, B, EOS], [C, EOS], [EOS], [EOS], [D, E, F, A], [B, C, D, EOS], [A, EOS],
            [EOS], [B, C, D, E, F], [A, B, C, D], [E, F, A, EOS], [C, EOS], [EOS], [D, EOS],
            [EOS]],
}


@pytest.mark.parametrize("document_format", DOCUMENT_FORMATS)
def test_documents_by_hand(document_format):
    sizes = np.array([len(line) for line in HAND_LINES])
    lines = ListDataset([torch.tensor(line) for line in HAND_LINES], sizes)
    documents = read_documents(lines, sizes, document_format, 6, PAD, EOS)
    assert [documents[i].tolist() for i in range(len(documents))] == \
        HAND_DOCUMENTS_6[document_format] == reference_documents(HAND_LINES, document_format, 6)
    assert documents.sizes.tolist() == [len(d) for d in HAND_DOCUMENTS_6[document_format]]


@pytest.mark.parametrize("document_format", DOCUMENT_FORMATS)
def test_documents_match_the_reference_on_random_data(document_format):
    rng = np.random.default_rng(12)
    for trial in range(200):
        max_length = int(rng.integers(3, 30))
        lines = [[EOS] if rng.random() < 0.25 else
                 [int(t) for t in rng.integers(FIRST_WORD, FIRST_WORD + len(WORDS),
                                               size=int(rng.integers(1, 3 * max_length)))] + [EOS]
                 for _ in range(int(rng.integers(1, 30)))]
        expected = reference_documents(lines, document_format, max_length)
        sizes = np.array([len(line) for line in lines])
        dataset = ListDataset([torch.tensor(line) for line in lines], sizes)
        if not expected:  # only empty lines
            with pytest.raises(ValueError, match="no document: every one of the"):
                read_documents(dataset, sizes, document_format, max_length, PAD, EOS)
            continue
        documents = read_documents(dataset, sizes, document_format, max_length, PAD, EOS)
        assert [documents[i].tolist() for i in range(len(documents))] == expected, trial
        assert max(documents.sizes) <= max_length


@pytest.mark.parametrize("name", ["hyb_pre", "nxt_pre", "msk_bi", "all_plain"])
def test_hand_documents_through_the_task(tmp_path, name):
    """The task on a data-bin with empty lines, long documents and one-line documents: its rows
    are the hand documents, packed, with Figure 3 applied to each (the </s> inside a document is
    an ordinary token) and every draw within its document's length."""
    data = write_data_bin(tmp_path / "bin", {"train": HAND_LINES * 3})
    task = BidirectionalLMTask.setup_task(config(data=str(data), tokens_per_sample=6,
                                                 **CONFIGS[name]))
    task.load_dataset("train")
    dataset = task.dataset("train")
    assert all_row_documents(dataset) == HAND_DOCUMENTS_6[BLANK_LINE_SEPARATED] * 3
    for index in range(len(dataset)):
        documents, objectives = row_documents(dataset, index)
        item = dataset[index]
        src, pos, tgt = item["source"].tolist(), item["positions"].tolist(), item["target"].tolist()
        start = 0
        for doc, objective in zip(documents, objectives):
            assert objective.n == len(doc) and 0 <= objective.n_bidir <= len(doc)
            span = slice(start, start + len(doc))
            masked = sorted(p for s, p in zip(src[span], pos[span]) if s == task.mask_idx)
            assert (src[span], pos[span], tgt[span]) == \
                figure_3_reference(doc, masked, objective.n_predict, task.mask_idx)
            start += len(doc)


def test_plain_lm_documents_are_whole_blank_line_documents():
    """--plain-lm-prob 1 with nxt_uni-style prediction on blank-line documents: every document
    predicts each next token of the document, across its line breaks (a </s> inside predicts
    the first token of the next line), and nothing after its last token."""
    rng = np.random.default_rng(4)
    lines = random_documents(rng, 200, 1, 12)
    dataset = build_dataset(lines, "hyb_uni", tokens_per_sample=40, plain_lm_prob=1.0,
                            document_format=BLANK_LINE_SEPARATED)
    inner_eos_targets = 0
    for index in range(len(dataset)):
        documents, objectives = row_documents(dataset, index)
        tgt = dataset[index]["target"].tolist()
        start = 0
        for doc, objective in zip(documents, objectives):
            assert (objective.n_mask, objective.n_bidir, objective.n_predict) == (0, 0, len(doc))
            assert tgt[start:start + len(doc)] == doc[1:] + [PAD]
            inner_eos_targets += doc[:-1].count(EOS)
            start += len(doc)
    assert inner_eos_targets > 50


@pytest.mark.parametrize("document_format, lines, expected", [
    (LINES, [[A, EOS], [EOS], [B, EOS]], "1 of its 3 lines are empty"),
    (LINES, [[A, EOS], [B, EOS]], None),
    (BLANK_LINE_SEPARATED, [[A, EOS], [B, C, EOS], [D, EOS]], "none of its 3 lines is empty"),
    (BLANK_LINE_SEPARATED, [[A, EOS], [EOS], [B, EOS]], None),
    (BLANK_LINE_SEPARATED, [[A, EOS]], None),  # one line: nothing to tell
])
def test_format_mismatch(document_format, lines, expected):
    reason = format_mismatch([len(line) for line in lines], document_format)
    if expected is None:
        assert reason is None
    else:
        assert expected in reason
        other = LINES if document_format == BLANK_LINE_SEPARATED else BLANK_LINE_SEPARATED
        assert f"use --document-format {other}" in reason


def test_the_task_warns_once_about_data_in_the_other_layout(tmp_path, caplog):
    lines = [[A, EOS], [B, EOS], [EOS], [C, EOS], [D, EOS]]
    data = write_data_bin(tmp_path / "bin", {"train": lines, "valid": lines})
    task = BidirectionalLMTask.setup_task(config(data=str(data), document_format="lines"))
    with caplog.at_level("WARNING"):
        for _ in range(3):
            task.load_dataset("train")
        task.load_dataset("valid")
    warnings = [r.getMessage() for r in caplog.records if "lines are empty" in r.getMessage()]
    assert len(warnings) == 2  # once per split, however often it is loaded
    assert all("use --document-format blank_line_separated" in w for w in warnings)
    caplog.clear()
    task = BidirectionalLMTask.setup_task(config(data=str(data)))
    with caplog.at_level("WARNING"):
        task.load_dataset("train")
    assert "--document-format" not in caplog.text


def test_a_split_of_empty_lines_only_is_refused(tmp_path):
    data = write_data_bin(tmp_path / "bin", {"train": [[EOS], [EOS]]})
    task = BidirectionalLMTask.setup_task(config(data=str(data)))
    with pytest.raises(ValueError, match="the train split of .*: no document: every one of the 2 "
                                         "lines is empty.*use --document-format lines"):
        task.load_dataset("train")


# --- 6. count expressions ------------------------------------------------------------------------

@pytest.mark.parametrize("text, env, expected", [
    ("0", {"n": 9}, 0),
    ("n", {"n": 9}, 9),
    ("n-n_bidir", {"n": 9, "n_bidir": 4}, 5),
    ("max(n-n_bidir,n_mask)", {"n": 9, "n_bidir": 8, "n_mask": 3}, 3),
    ("max(n - n_bidir, n_mask)", {"n": 9, "n_bidir": 2, "n_mask": 3}, 7),
    ("min(n,5,7)+1", {"n": 9}, 6),
    ("n-(n_bidir-2)", {"n": 9, "n_bidir": 4}, 7),
    ("B(n,1)", {"n": 9}, 9),
    ("B(n,0)", {"n": 9}, 0),
    ("B(n-n_bidir-12,p)", {"n": 9, "n_bidir": 4}, 0),
    ("U(n,n)", {"n": 9}, 9),
])
def test_count_expressions_evaluate(text, env, expected):
    assert parse_count_expression(text).draw(env, np.random.default_rng(0), 0.15) == expected


def test_random_count_expressions_draw_their_distributions():
    rng = np.random.default_rng(11)
    uniform = parse_count_expression("U(2,n-1)")
    values = np.array([uniform.draw({"n": 7}, rng, 0.15) for _ in range(4000)])
    statistic, _ = chi_square_uniform(values, range(2, 7))
    assert statistic < CHI2_999[4] and set(values) == {2, 3, 4, 5, 6}
    binomial = parse_count_expression("B(n,0.3)")
    values = np.array([binomial.draw({"n": 10}, rng, 0.15) for _ in range(4000)])
    assert abs(values.mean() - 3.0) < 5 * math.sqrt(2.1 / 4000)
    assert parse_count_expression("U(1,n)").bounds({"n": 6}, 0.15) == (1, 6)
    assert parse_count_expression("max(n-n_bidir,B(n,p))").bounds({"n": 6, "n_bidir": 5}, 0.15) == (1, 6)


def test_values_are_clamped_to_the_document():
    sampler = ObjectiveSampler.from_flags("hyb_uni", n_mask="3", plain_lm_prob=0.0)
    assert sampler.draw(2, np.random.default_rng(0)) == DocumentObjective(2, 2, 0, 2)
    assert sampler.draw(1, np.random.default_rng(0)) == DocumentObjective(1, 1, 0, 1)
    one = ObjectiveSampler.from_flags("hyb_pre", plain_lm_prob=0.0).draw(1, np.random.default_rng(0))
    assert one.n_bidir == 1 and one.n_predict == max(1 - 1, one.n_mask)


@pytest.mark.parametrize("text, message", [
    ("", "empty"),
    ("U(1,n", r"expected '\)'"),
    ("n n", "unexpected 'n'"),
    ("m", "unknown name 'm'"),
    ("2*n", "unexpected character '\\*'"),
    ("1.5", "not an integer"),
    ("p", "only allowed as the probability"),
    ("B(n,1.5)", r"must be in \[0, 1\]"),
    ("B(n,n)", "must be p or a number"),
    ("U(1)", "U takes 2 arguments"),
    ("max(n)", "max takes 2 or more"),
    ("foo(n)", "unknown name 'foo'"),
])
def test_malformed_expressions_are_refused_naming_the_flag(text, message):
    with pytest.raises(ValueError, match=re.escape(f"--n-bidir {text!r}: ") + f".*{message}"):
        ObjectiveSampler.from_flags("hyb_pre", n_bidir=text)


# --- 7. the task, its flags and its errors -------------------------------------------------------

def write_data_bin(directory, splits, dictionary=None):
    dictionary = dictionary or make_dictionary(with_mask=False)
    directory.mkdir(parents=True, exist_ok=True)
    dictionary.save(str(directory / "dict.txt"))
    for split, documents in splits.items():
        builder = indexed_dataset.make_builder(str(directory / f"{split}.bin"), impl="mmap",
                                               vocab_size=len(dictionary))
        for doc in documents:
            builder.add_item(torch.tensor(doc, dtype=torch.int32))
        builder.finalize(str(directory / f"{split}.idx"))
    return directory


def parse_training_flags(*flags):
    parser = options.get_training_parser(default_task="bidirectional_lm")
    return options.parse_args_and_arch(parser, input_args=[
        *flags, "--task", "bidirectional_lm", "--arch", "bidir_lm_tiny",
        "--criterion", "bidirectional_lm", "--user-dir", fairseq_ext.__path__[0], "--seed", "5"])


def test_cli_flags_reach_the_task_through_hydra(tmp_path):
    rng = np.random.default_rng(8)
    train = random_documents(rng, 60, 1, 30)
    data = write_data_bin(tmp_path / "bin", {"train": train, "valid": random_documents(rng, 10, 1, 30)})
    args = parse_training_flags(
        str(data), "--variant", "msk_uni", "--tokens-per-sample", "16", "--mask-prob", "0.3",
        "--n-bidir", "U(1,n)", "--n-predict", "max(n-n_bidir,n_mask)",
        "--no-cross-document-attention", "--max-tokens", "64")
    cfg = convert_namespace_to_omegaconf(args)
    assert cfg.task.n_predict == "max(n-n_bidir,n_mask)" and cfg.task.n_bidir == "U(1,n)"
    assert cfg.task.n_mask is None and cfg.task.seed == 5
    task = tasks.setup_task(cfg.task)
    assert isinstance(task, BidirectionalLMTask) and task.cross_document_attention is False
    assert task.mask_idx == len(task.source_dictionary) - 1
    assert task.source_dictionary[task.mask_idx] == "<mask>"
    assert task.sampler.n_mask.text == "B(n,p)" and task.sampler.mask_prob == 0.3
    assert task.max_positions() == 16
    task.load_dataset("train")
    iterator = task.get_batch_iterator(task.dataset("train"), max_tokens=64, seed=5, epoch=1)
    total = 0
    for batch in iterator.next_epoch_itr(shuffle=True):
        total += batch["ntokens"]
        assert batch["net_input"]["src_tokens"].size(1) <= 16
        assert batch["ntokens"] == int(batch["net_input"]["src_lengths"].sum())
    # every token once, nothing truncated; the empty lines between documents are not tokens
    assert total == sum(len(d) for d in train if d != [EOS])
    default = tasks.setup_task(convert_namespace_to_omegaconf(parse_training_flags(str(data))).task)
    assert default.cross_document_attention is True and str(default.cfg.variant) == "hyb_pre"


def test_the_batch_feeds_the_bidirectional_lm_model_and_criterion(tmp_path):
    """The contract end to end: fairseq builds the bidirectional_lm model and criterion from the
    same flags, the model reads --no-cross-document-attention from the run, and the criterion
    scores exactly the non-pad targets, <mask> inputs as masked-token targets."""
    rng = np.random.default_rng(9)
    data = write_data_bin(tmp_path / "bin", {"train": random_documents(rng, 40, 1, 20)})
    for cross_flags in ([], ["--no-cross-document-attention"]):
        cfg = convert_namespace_to_omegaconf(parse_training_flags(
            str(data), "--variant", "hyb_pre", "--tokens-per-sample", "32", *cross_flags))
        task = tasks.setup_task(cfg.task)
        task.load_dataset("train")
        model = task.build_model(cfg.model)
        assert model.decoder.cross_document is not cross_flags
        criterion = task.build_criterion(cfg.criterion)
        batch = whole_batch(task.dataset("train"))
        model.eval()
        with torch.no_grad():
            loss, sample_size, log = criterion(model, batch)
        target = batch["target"]
        assert sample_size == int(target.ne(PAD).sum()) > 0
        assert torch.isfinite(loss)
        is_mask_target = target.ne(PAD) & batch["net_input"]["src_tokens"].eq(task.mask_idx)
        assert 0 < int(is_mask_target.sum()) < sample_size


def test_cli_refuses_an_unknown_variant(capsys):
    with pytest.raises(SystemExit):
        parse_training_flags("data", "--variant", "msk_pre")
    assert "--variant" in capsys.readouterr().err


def config(**overrides):
    return BidirectionalLMConfig(**{"data": "unused", "seed": 1, **overrides})


@pytest.mark.parametrize("overrides, message", [
    (dict(variant="msk_pre"), "--variant 'msk_pre' is not one of Table 1's variants"),
    (dict(mask_prob=1.5), r"--mask-prob 1.5 is not a probability in \[0, 1\]"),
    (dict(mask_prob=-0.1), r"--mask-prob -0.1 is not a probability"),
    (dict(plain_lm_prob=2.0), r"--plain-lm-prob 2.0 is not a probability"),
    (dict(sample_break_mode="none"), "--sample-break-mode none: .*cuts documents"),
    (dict(tokens_per_sample=0), "--tokens-per-sample 0 must be positive"),
    (dict(sample_break_mode="complete_doc", tokens_per_sample=2, document_format="lines"),
     "--tokens-per-sample 2 with complete_doc"),
    (dict(sample_break_mode="complete_doc"),
     "--sample-break-mode complete_doc with --document-format blank_line_separated: the "
     "documents are already read whole"),
    (dict(tokens_per_sample=2), "--tokens-per-sample 2 with --document-format "
                                "blank_line_separated: must be at least 3"),
    (dict(document_format="paragraphs"), "--document-format 'paragraphs' is not one of "
                                         "blank_line_separated, lines"),
    # footnote 1: the prefix LM must not predict inside its prefix
    (dict(variant="nxt_pre", n_predict="n"), r"--n-predict 'n' .*footnote 1.*at most"),
    (dict(variant="hyb_pre", n_predict="n-n_bidir+n_mask"), r"--n-predict 'n-n_bidir\+n_mask'.*footnote 1"),
    (dict(variant="msk_bi", n_predict="n"), r"--n-predict 'n'.*footnote 1"),
    (dict(variant="nxt_pre", n_bidir="100", n_predict="n-90"), r"--n-predict 'n-90'.*footnote 1"),
    (dict(variant="hyb_pre", n_bidir="U(5,n)"), r"--n-bidir 'U\(5,n\)': U\(5,1\) is empty"),
    (dict(variant="hyb_pre", n_mask="n_bidir"), "--n-mask 'n_bidir' may only use n; it uses n_bidir"),
    (dict(variant="hyb_pre", n_bidir="n-n_predict"), "--n-bidir 'n-n_predict' may only use n, n_mask"),
])
def test_bad_configs_are_refused_at_setup_naming_the_flag(overrides, message):
    with pytest.raises(ValueError, match=message):
        objective_sampler(config(**overrides))
    with pytest.raises(ValueError, match=message):
        BidirectionalLMTask.setup_task(config(**overrides))  # before any data is read


def test_every_variant_and_the_custom_configs_pass_setup():
    for overrides in CONFIGS.values():
        objective_sampler(config(**overrides, tokens_per_sample=1024))


def test_a_dictionary_with_mask_and_data_with_mask_are_refused(tmp_path):
    data = write_data_bin(tmp_path / "with_mask", {"train": [[A, EOS]]}, make_dictionary(True))
    with pytest.raises(ValueError, match="already contains <mask>"):
        BidirectionalLMTask.setup_task(config(data=str(data)))
    dataset = build_dataset([[A, MASK, EOS]], "nxt_uni")
    with pytest.raises(ValueError, match="contains the <mask> token itself"):
        dataset[0]


def test_msk_variants_warn_that_plain_documents_predict_nothing(tmp_path, caplog):
    data = write_data_bin(tmp_path / "bin", {"train": [[A, EOS]]})
    with caplog.at_level("WARNING"):
        BidirectionalLMTask.setup_task(config(data=str(data), variant="msk_bi"))
    assert "nothing to predict" in caplog.text


def test_on_a_preprocessed_data_bin(tiny_data_bin):
    """fairseq-preprocess output (sentence lines, blank lines between documents): rows of at
    most tokens_per_sample holding the documents of the blank-line rule (reference_documents
    over the data-bin's own lines), several lines each, targets never visible."""
    task = BidirectionalLMTask.setup_task(config(data=str(tiny_data_bin), tokens_per_sample=64))
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    assert max(dataset.sizes) <= 64
    lines = indexed_dataset.MMapIndexedDataset(str(tiny_data_bin / "valid"))
    documents = reference_documents([lines[i].tolist() for i in range(len(lines))],
                                    BLANK_LINE_SEPARATED, 64)
    assert all_row_documents(dataset) == documents
    assert sum(doc.count(EOS) > 1 for doc in documents) > len(documents) / 2
    for index in range(len(dataset)):
        documents, objectives = row_documents(dataset, index)
        assert all(doc[-1] == EOS for doc in documents)
        item = dataset[index]
        src, pos, tgt = item["source"].tolist(), item["positions"].tolist(), item["target"].tolist()
        start = 0
        for doc, objective in zip(documents, objectives):
            span = slice(start, start + len(doc))
            masked = sorted(p for s, p in zip(src[span], pos[span]) if s == task.mask_idx)
            assert (src[span], pos[span], tgt[span]) == \
                figure_3_reference(doc, masked, objective.n_predict, task.mask_idx)
            start += len(doc)


def test_expected_predicted_share_by_hand():
    """The share of tokens that get a loss, which sets a variant's training FLOPs per token:
    NxtUni predicts every token; MskBi its masks (none on plain-LM documents); HybPre with a
    fixed prefix the rest of the document; drawn once per document."""
    rng = np.random.default_rng(0)
    lengths = [10, 20, 30, 0]  # a 0-token document counts for nothing
    assert ObjectiveSampler.from_flags("nxt_uni").expected_predicted_share(lengths, rng) == 1.0
    every = ObjectiveSampler.from_flags("msk_bi", mask_prob=1.0, plain_lm_prob=0.0)
    assert every.expected_predicted_share(lengths, rng) == 1.0
    none = ObjectiveSampler.from_flags("msk_bi", plain_lm_prob=1.0)  # plain LM: nothing to predict
    assert none.expected_predicted_share(lengths, rng) == 0.0
    # hyb_pre with n_mask 2 and n_bidir 4 on every document: max(n - 4, 2) of n
    fixed = ObjectiveSampler.from_flags("hyb_pre", n_mask="2", n_bidir="4", plain_lm_prob=0.0)
    assert fixed.expected_predicted_share(lengths, rng) == pytest.approx((6 + 16 + 26) / 60)
    # binomial masks: the share converges on mask_prob x (1 - plain_lm_prob)
    msk_bi = ObjectiveSampler.from_flags("msk_bi", mask_prob=0.15, plain_lm_prob=0.1)
    share = msk_bi.expected_predicted_share([40] * 4000, rng)
    assert share == pytest.approx(0.15 * 0.9, abs=0.005)
    with pytest.raises(ValueError, match="no document"):
        msk_bi.expected_predicted_share([0, 0], rng)
