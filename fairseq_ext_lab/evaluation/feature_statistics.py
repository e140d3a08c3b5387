"""Statistics of a model's token features and of probes, each with ± one standard error: the
leave-one-text-out jackknife, mean pairwise cosine (anisotropy), effective rank (Roy & Vetterli
2007), attention entropy, and a frozen logistic-regression probe; pure numpy (scikit-learn for
the probe), each checked against a hand computation in tests/test_transfer_diagnosis.py. The
transfer diagnosis (:mod:`fairseq_ext_lab.transfer_diagnosis`) reports them.
"""
import math
from typing import Sequence, Tuple

import numpy as np

from fairseq_ext.reporting.uncertainty import Estimate, binomial_standard_error


def jackknife(statistic_without, groups: int, full: float) -> Estimate:
    """The leave-one-group-out jackknife: ``statistic_without(g)`` is the statistic with group
    ``g`` left out; SE ``sqrt((G - 1) / G * sum (theta_g - mean theta)^2)``."""
    if groups < 2:
        return Estimate(full, math.nan)
    values = np.array([statistic_without(g) for g in range(groups)], dtype=np.float64)
    spread = np.sum((values - values.mean()) ** 2)
    return Estimate(float(full), float(math.sqrt((groups - 1) / groups * spread)))


def _group_index(groups: np.ndarray) -> Tuple[np.ndarray, int]:
    _, index = np.unique(groups, return_inverse=True)
    return index, int(index.max()) + 1 if len(index) else 0


def mean_pairwise_cosine(vectors: np.ndarray, groups: np.ndarray) -> Estimate:
    """The mean cosine over all pairs ``i != j`` of the rows of ``vectors`` ``(N, C)``,
    ``(||sum u||^2 - N) / (N (N - 1))`` with ``u`` the unit rows, ± the jackknife over
    ``groups`` (a group id per row: the text it comes from). Zero rows count as cosine 0."""
    vectors = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    units = np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)
    index, count = _group_index(np.asarray(groups))
    sums = np.zeros((count, vectors.shape[1]))
    np.add.at(sums, index, units)
    sizes = np.bincount(index, minlength=count).astype(np.float64)
    squares = np.bincount(index, weights=np.sum(units * units, axis=1), minlength=count)
    total, n, total_sq = sums.sum(0), sizes.sum(), squares.sum()

    def value(vector_sum, rows, square_sum):
        return float((vector_sum @ vector_sum - square_sum) / (rows * (rows - 1)))

    return jackknife(lambda g: value(total - sums[g], n - sizes[g], total_sq - squares[g]),
                     count, value(total, n, total_sq))


def effective_rank_of_gram(gram: np.ndarray) -> float:
    """``exp(-sum p log p)``, ``p`` the singular values of ``X`` normalised to sum 1, from the
    Gram matrix ``X^T X`` (its eigenvalues are the squared singular values)."""
    eigenvalues = np.clip(np.linalg.eigvalsh(gram), 0.0, None)
    singular = np.sqrt(eigenvalues)
    total = singular.sum()
    if total <= 0:
        return 0.0
    p = singular[singular > 0] / total
    return float(math.exp(-np.sum(p * np.log(p))))


#: The jackknife of the effective rank leaves out one of at most this many blocks of
#: consecutive groups (a delete-a-block jackknife): one ``C x C`` Gram matrix per block.
RANK_JACKKNIFE_BLOCKS = 100


def effective_rank(vectors: np.ndarray, groups: np.ndarray) -> Estimate:
    """The effective rank (Roy & Vetterli 2007) of ``vectors`` ``(N, C)`` as they are (not
    centred: a shared direction is what a collapse adds), ± the jackknife over ``groups``
    (over blocks of consecutive groups when there are more than
    :data:`RANK_JACKKNIFE_BLOCKS`)."""
    vectors = np.asarray(vectors, dtype=np.float64)
    index, count = _group_index(np.asarray(groups))
    if count > RANK_JACKKNIFE_BLOCKS:
        index, count = index * RANK_JACKKNIFE_BLOCKS // count, RANK_JACKKNIFE_BLOCKS
    grams = np.zeros((count, vectors.shape[1], vectors.shape[1]))
    for g in range(count):
        rows = vectors[index == g]
        grams[g] = rows.T @ rows
    total = grams.sum(0)
    return jackknife(lambda g: effective_rank_of_gram(total - grams[g]), count,
                     effective_rank_of_gram(total))


def mean_over_groups(values: np.ndarray, groups: np.ndarray) -> Estimate:
    """The mean of per-row ``values`` (all rows weighted alike), ± the jackknife over
    ``groups``."""
    values = np.asarray(values, dtype=np.float64)
    index, count = _group_index(np.asarray(groups))
    sums = np.bincount(index, weights=values, minlength=count)
    sizes = np.bincount(index, minlength=count).astype(np.float64)
    return jackknife(lambda g: (sums.sum() - sums[g]) / (sizes.sum() - sizes[g]), count,
                     float(sums.sum() / sizes.sum()))


def attention_entropy_bits(weights: np.ndarray, lengths: Sequence[int]) -> np.ndarray:
    """Per text, the attention entropy ``-sum_k p log2 p`` averaged over heads and the text's
    real query positions. ``weights`` ``(H, B, T, T)`` (fairseq's ``need_head_weights``), the
    first ``lengths[b]`` positions of row ``b`` real (right padding)."""
    out = np.zeros(len(lengths))
    for b, length in enumerate(lengths):
        p = np.asarray(weights[:, b, :length, :length], dtype=np.float64)
        logs = np.log2(np.where(p > 0, p, 1.0))
        out[b] = float(np.mean(-np.sum(p * logs, axis=-1)))
    return out


def accuracy_estimate(correct: np.ndarray) -> Estimate:
    """Accuracy (%) of 0/1 ``correct`` ± the binomial error over rows."""
    correct = np.asarray(correct, dtype=np.float64)
    return Estimate(100.0 * correct.mean(), 100.0 * binomial_standard_error(correct.sum(),
                                                                            len(correct)))


def paired_accuracy_difference(correct_a: np.ndarray, correct_b: np.ndarray) -> Estimate:
    """``acc_a - acc_b`` (points) on the same rows, ± ``sd(c_a - c_b) / sqrt(N)``."""
    d = np.asarray(correct_a, dtype=np.float64) - np.asarray(correct_b, dtype=np.float64)
    error = float(np.std(d, ddof=1) / math.sqrt(len(d))) if len(d) > 1 else math.nan
    return Estimate(100.0 * float(d.mean()), 100.0 * error)


def linear_probe(train_x: np.ndarray, train_y: np.ndarray, dev_x: np.ndarray,
                 dev_y: np.ndarray) -> np.ndarray:
    """A frozen linear probe: logistic regression (scikit-learn, C = 1) on features
    standardised with the training rows' mean and SD; returns the 0/1 correctness per dev row.
    Features without variance on train are dropped (a collapsed layer probes at the majority)."""
    from sklearn.linear_model import LogisticRegression

    train_x, dev_x = np.asarray(train_x, np.float64), np.asarray(dev_x, np.float64)
    mean, sd = train_x.mean(0), train_x.std(0)
    # a feature varies only if it does beyond float32 rounding (a collapsed float32 layer still
    # differs in its last bits, which a standardised probe would fit)
    keep = sd > 1e-5 * np.maximum(1.0, np.abs(mean))
    if not keep.any() or len(set(np.asarray(train_y).tolist())) < 2:
        majority = np.bincount(np.asarray(train_y)).argmax()
        return (np.asarray(dev_y) == majority).astype(np.float64)
    scale = lambda x: (x[:, keep] - mean[keep]) / sd[keep]  # noqa: E731
    probe = LogisticRegression(C=1.0, max_iter=2000)
    probe.fit(scale(train_x), train_y)
    return (probe.predict(scale(dev_x)) == np.asarray(dev_y)).astype(np.float64)
