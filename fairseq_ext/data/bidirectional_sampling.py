"""The per-document knobs of "generalized bidirectionality" (Artetxe et al. 2022, §2 and
Table 1): how many tokens of a document of ``n`` tokens are masked (``n_mask``), how long its
bidirectional-attention prefix is (``n_bidir``) and over how many of its last tokens the loss is
defined (``n_predict``).

Each knob is a *count expression* in Table 1's vocabulary (:func:`parse_count_expression`), drawn
in the order ``n_mask``, ``n_bidir``, ``n_predict``, each naming ``n`` and the knobs before it,
and clamped to ``0..n``. Table 1's variants are :data:`VARIANTS`; ``--n-mask`` / ``--n-bidir`` /
``--n-predict`` override a variant's expressions one by one. With probability
``--plain-lm-prob`` (Table 1's caption) a document gets ``n_mask = n_bidir = 0``. No position may
predict a token it can attend to (§2, footnote 1): :func:`largest_safe_n_predict` states the
exact bound, :meth:`ObjectiveSampler.check_targets_stay_hidden` rejects expressions that can
break it when the config is read, and each drawn document is checked again. The choices where
the paper is silent (plain-LM documents of ``msk_*``, the leak rule): docs/bidirectional.md.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Optional, Tuple

import numpy as np

from fairseq_ext.cli.errors import ConfigError

#: The knobs, in the order they are drawn, and the flag that sets each.
FLAGS = {"n_mask": "--n-mask", "n_bidir": "--n-bidir", "n_predict": "--n-predict"}
#: Names each knob's expression may use: the document length and the knobs drawn before it.
ALLOWED_NAMES = {"n_mask": ("n",), "n_bidir": ("n", "n_mask"),
                 "n_predict": ("n", "n_mask", "n_bidir")}


@dataclass(frozen=True)
class VariantExpressions:
    """One row of Table 1: the count expressions of ``n_mask``, ``n_bidir``, ``n_predict``."""

    n_mask: str
    n_bidir: str
    n_predict: str


#: Table 1 of the paper (``B(n, p)`` with ``p`` = ``--mask-prob``, 0.15 in the paper).
VARIANTS: Dict[str, VariantExpressions] = {
    "nxt_uni": VariantExpressions("0", "0", "n"),                        # GPT
    "nxt_pre": VariantExpressions("0", "U(1,n)", "n-n_bidir"),           # prefix LM
    "msk_uni": VariantExpressions("B(n,p)", "0", "n_mask"),
    "msk_bi": VariantExpressions("B(n,p)", "n", "n_mask"),               # BERT / RoBERTa
    "hyb_uni": VariantExpressions("B(n,p)", "0", "n"),                   # CM3-like
    "hyb_pre": VariantExpressions("B(n,p)", "U(1,n)", "max(n-n_bidir,n_mask)"),
}

GRAMMAR_HELP = ("count expressions are integers, n, n_mask, n_bidir, + and -, parentheses, "
                "max(a,b,...), min(a,b,...), B(count,p) (binomial; p is --mask-prob or a number "
                "in [0, 1]) and U(low,high) (discrete uniform on low..high)")


class EmptyRangeError(ValueError):
    """``U(low, high)`` with ``low > high``."""


# --- expressions -------------------------------------------------------------------------------

Environment = Dict[str, int]
Bounds = Tuple[int, int]


class CountExpression:
    """A node of a parsed count expression. ``draw`` samples one value; ``bounds`` gives the
    smallest and largest value it can take given the names' values (every draw inside an
    expression is independent of the others, so interval arithmetic is exact)."""

    def draw(self, env: Environment, rng: np.random.Generator, mask_prob: float) -> int:
        raise NotImplementedError

    def bounds(self, env: Environment, mask_prob: float) -> Bounds:
        raise NotImplementedError

    def names(self) -> FrozenSet[str]:
        return frozenset().union(*(child.names() for child in self.children()))

    def literals(self) -> FrozenSet[int]:
        return frozenset().union(*(child.literals() for child in self.children()))

    def children(self) -> Tuple["CountExpression", ...]:
        return ()


@dataclass(frozen=True)
class Literal(CountExpression):
    value: int

    def draw(self, env, rng, mask_prob):
        return self.value

    def bounds(self, env, mask_prob):
        return self.value, self.value

    def literals(self):
        return frozenset({self.value})


@dataclass(frozen=True)
class Name(CountExpression):
    name: str

    def draw(self, env, rng, mask_prob):
        return env[self.name]

    def bounds(self, env, mask_prob):
        return env[self.name], env[self.name]

    def names(self):
        return frozenset({self.name})


@dataclass(frozen=True)
class SignedSum(CountExpression):
    """``t0 ± t1 ± ...``: ``terms`` are ``(sign, expression)`` pairs, sign +1 or -1."""

    terms: Tuple[Tuple[int, CountExpression], ...]

    def children(self):
        return tuple(term for _, term in self.terms)

    def draw(self, env, rng, mask_prob):
        return sum(sign * term.draw(env, rng, mask_prob) for sign, term in self.terms)

    def bounds(self, env, mask_prob):
        low = high = 0
        for sign, term in self.terms:
            term_low, term_high = term.bounds(env, mask_prob)
            if sign > 0:
                low, high = low + term_low, high + term_high
            else:
                low, high = low - term_high, high - term_low
        return low, high


@dataclass(frozen=True)
class Extremum(CountExpression):
    """``max(...)`` or ``min(...)`` of two or more expressions."""

    function: str
    arguments: Tuple[CountExpression, ...]

    def children(self):
        return self.arguments

    def _pick(self, values):
        return max(values) if self.function == "max" else min(values)

    def draw(self, env, rng, mask_prob):
        return self._pick([argument.draw(env, rng, mask_prob) for argument in self.arguments])

    def bounds(self, env, mask_prob):
        bounds = [argument.bounds(env, mask_prob) for argument in self.arguments]
        return self._pick([low for low, _ in bounds]), self._pick([high for _, high in bounds])


@dataclass(frozen=True)
class Binomial(CountExpression):
    """``B(count, prob)``: the number of successes in ``count`` trials (0 for ``count <= 0``);
    ``probability`` ``None`` stands for ``p``, the ``--mask-prob``."""

    count: CountExpression
    probability: Optional[float] = None

    def children(self):
        return (self.count,)

    def _probability(self, mask_prob):
        return mask_prob if self.probability is None else self.probability

    def draw(self, env, rng, mask_prob):
        count = max(self.count.draw(env, rng, mask_prob), 0)
        return int(rng.binomial(count, self._probability(mask_prob)))

    def bounds(self, env, mask_prob):
        low, high = (max(value, 0) for value in self.count.bounds(env, mask_prob))
        probability = self._probability(mask_prob)
        if probability <= 0.0:
            return 0, 0
        if probability >= 1.0:
            return low, high
        return 0, high


@dataclass(frozen=True)
class UniformInteger(CountExpression):
    """``U(low, high)``: uniform on ``low, low + 1, ..., high`` (both included)."""

    low: CountExpression
    high: CountExpression

    def children(self):
        return (self.low, self.high)

    def draw(self, env, rng, mask_prob):
        low, high = self.low.draw(env, rng, mask_prob), self.high.draw(env, rng, mask_prob)
        if low > high:
            raise EmptyRangeError(f"U({low},{high}) is empty for a document of n={env['n']} tokens")
        return int(rng.integers(low, high + 1))

    def bounds(self, env, mask_prob):
        low_low, low_high = self.low.bounds(env, mask_prob)
        high_low, high_high = self.high.bounds(env, mask_prob)
        if low_high > high_low:
            raise EmptyRangeError(f"U({low_high},{high_low}) is empty for a document of "
                                  f"n={env['n']} tokens")
        return low_low, high_high


# --- parsing -----------------------------------------------------------------------------------

_TOKEN = re.compile(r"\s*(?:(?P<number>\d+(?:\.\d*)?|\.\d+)|(?P<name>[A-Za-z_][A-Za-z_0-9]*)"
                    r"|(?P<symbol>[(),+\-]))")
_FUNCTIONS = ("max", "min", "B", "U")
#: Names the parser knows; which of them a knob may use is ALLOWED_NAMES (n_predict: none).
_NAMES = ("n", "n_mask", "n_bidir", "n_predict")


class _Parser:
    """Recursive-descent parser of the grammar of :func:`parse_count_expression`."""

    def __init__(self, text: str):
        self.tokens = []
        position, text = 0, text.rstrip()
        while position < len(text):
            match = _TOKEN.match(text, position)
            if match is None or match.end() == position:
                raise ValueError(f"unexpected character {text[position:].lstrip()[:1]!r}")
            kind = match.lastgroup
            self.tokens.append((kind, match.group(kind)))
            position = match.end()
        self.index = 0

    def peek(self):
        return self.tokens[self.index] if self.index < len(self.tokens) else (None, None)

    def take(self, expected: Optional[str] = None):
        kind, value = self.peek()
        if kind is None:
            raise ValueError(f"expected {expected!r} but the expression ended" if expected
                             else "the expression ended too early")
        if expected is not None and value != expected:
            raise ValueError(f"expected {expected!r}, found {value!r}")
        self.index += 1
        return kind, value

    def parse(self) -> CountExpression:
        if not self.tokens:
            raise ValueError("the expression is empty")
        expression = self.expression()
        if self.index != len(self.tokens):
            raise ValueError(f"unexpected {self.peek()[1]!r} after a complete expression")
        return expression

    def expression(self) -> CountExpression:
        terms = [(1, self.term())]
        while self.peek()[1] in ("+", "-"):
            sign = 1 if self.take()[1] == "+" else -1
            terms.append((sign, self.term()))
        return terms[0][1] if len(terms) == 1 else SignedSum(tuple(terms))

    def term(self) -> CountExpression:
        kind, value = self.take()
        if kind == "number":
            if not value.isdigit():
                raise ValueError(f"{value} is not an integer (numbers other than counts are only "
                                 "allowed as the probability of B(count,prob))")
            return Literal(int(value))
        if value == "(":
            inner = self.expression()
            self.take(")")
            return inner
        if kind == "name" and value in _FUNCTIONS:
            return self.call(value)
        if kind == "name" and value in _NAMES:
            return Name(value)
        if kind == "name" and value == "p":
            raise ValueError("p (--mask-prob) is only allowed as the probability of B(count,p)")
        raise ValueError(f"unknown name {value!r}" if kind == "name" else f"unexpected {value!r}")

    def call(self, function: str) -> CountExpression:
        self.take("(")
        if function == "B":
            count = self.expression()
            self.take(",")
            probability = self.probability()
            self.take(")")
            return Binomial(count, probability)
        arguments = [self.expression()]
        while self.peek()[1] == ",":
            self.take(",")
            arguments.append(self.expression())
        self.take(")")
        if function == "U":
            if len(arguments) != 2:
                raise ValueError(f"U takes 2 arguments (low, high), found {len(arguments)}")
            return UniformInteger(*arguments)
        if len(arguments) < 2:
            raise ValueError(f"{function} takes 2 or more arguments, found {len(arguments)}")
        return Extremum(function, tuple(arguments))

    def probability(self) -> Optional[float]:
        kind, value = self.take()
        if kind == "name" and value == "p":
            return None
        if kind != "number":
            raise ValueError(f"the probability of B(count,prob) must be p or a number, found {value!r}")
        probability = float(value)
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"the probability of B(count,prob) must be in [0, 1], found {value}")
        return probability


def parse_count_expression(text: str) -> CountExpression:
    """Parse one count expression; a malformed one raises ``ValueError`` saying what is wrong::

        expr  := term (("+" | "-") term)*
        term  := INTEGER | "n" | "n_mask" | "n_bidir" | "(" expr ")"
               | "max(" expr "," expr ("," expr)* ")" | "min(" ... ")"
               | "B(" expr "," prob ")"      binomial draw; prob is "p" (--mask-prob) or in [0, 1]
               | "U(" expr "," expr ")"      discrete uniform draw on low..high, both included

    ``B(k, p)`` with ``k <= 0`` is 0; an empty ``U(low, high)`` (``low > high``) is an error."""
    return _Parser(str(text)).parse()


# --- the three knobs of a run ------------------------------------------------------------------

@dataclass(frozen=True)
class CountRule:
    """One knob (``n_mask``, ``n_bidir`` or ``n_predict``): its expression as written and parsed."""

    knob: str
    text: str
    expression: CountExpression = field(compare=False)

    @property
    def flag(self) -> str:
        return FLAGS[self.knob]

    def describe(self) -> str:
        return f"{self.flag} {self.text!r}"

    @classmethod
    def parse(cls, knob: str, text: str) -> "CountRule":
        try:
            expression = parse_count_expression(text)
        except ValueError as error:
            raise ConfigError(f"{FLAGS[knob]} {text!r}: {error}; {GRAMMAR_HELP}") from None
        unknown = expression.names() - set(ALLOWED_NAMES[knob])
        if unknown:
            later = " (not drawn before it)" if unknown <= set(_NAMES) else ""
            raise ConfigError(f"{FLAGS[knob]} {text!r} may only use {', '.join(ALLOWED_NAMES[knob])};"
                              f" it uses {', '.join(sorted(unknown))}{later}. The knobs are drawn "
                              "in the order n_mask, n_bidir, n_predict")
        return cls(knob, text, expression)

    def draw(self, env: Environment, rng: np.random.Generator, mask_prob: float) -> int:
        try:
            value = self.expression.draw(env, rng, mask_prob)
        except EmptyRangeError as error:
            raise ConfigError(f"{self.describe()}: {error}") from None
        return min(max(value, 0), env["n"])

    def bounds(self, env: Environment, mask_prob: float) -> Bounds:
        try:
            low, high = self.expression.bounds(env, mask_prob)
        except EmptyRangeError as error:
            raise ConfigError(f"{self.describe()}: {error}; write e.g. U(min(a,n),n) to keep the "
                              "range non-empty") from None
        n = env["n"]
        return min(max(low, 0), n), min(max(high, 0), n)


def largest_safe_n_predict(n: int, n_mask: int, n_bidir: int) -> int:
    """The largest ``n_predict`` for which no position of a document can attend to its own
    target, whichever ``n_mask`` tokens are masked: ``max(n_mask, n - n_bidir) + 1`` (capped at
    ``n``).

    In the reordered document (unmasked tokens in their order, then the masked ones) a
    next-token position ``i`` sees its target, the next unmasked token at ``i + 1``, exactly when
    ``i + 1 < n_bidir``; masked targets are hidden behind ``<mask>`` everywhere. So the loss
    window may reach back to the last prefix token, whose next token lies outside the prefix.
    Footnote 1's ``n_predict <= n - n_bidir + n_mask`` is not sufficient (``n = 10``,
    ``n_mask = 3``, ``n_bidir = 6``, ``n_predict = 7`` lets position 3 see position 4)."""
    return min(max(n_mask, n - n_bidir) + 1, n)


@dataclass(frozen=True)
class DocumentObjective:
    """What is drawn for one document: its knobs and whether it is a plain-LM document."""

    n: int
    n_mask: int
    n_bidir: int
    n_predict: int
    plain_lm: bool = False


#: Documents up to this length are checked for every value of the knobs at setup; longer ones at
#: the values where piecewise-linear expressions change behaviour (and every draw at run time).
EXHAUSTIVE_CHECK_LENGTH = 40


@dataclass(frozen=True)
class ObjectiveSampler:
    """Draws :class:`DocumentObjective` s for documents (Table 1, with ``--n-*`` overrides)."""

    n_mask: CountRule
    n_bidir: CountRule
    n_predict: CountRule
    mask_prob: float = 0.15
    plain_lm_prob: float = 0.1

    @classmethod
    def from_flags(cls, variant: str, mask_prob: float = 0.15, plain_lm_prob: float = 0.1,
                   n_mask: Optional[str] = None, n_bidir: Optional[str] = None,
                   n_predict: Optional[str] = None) -> "ObjectiveSampler":
        """The sampler of ``--variant`` with the given ``--n-*`` overrides (``None``: the
        variant's expression). Raises ``ValueError`` naming the flag for bad input."""
        variant = str(variant)
        if variant not in VARIANTS:
            raise ConfigError(f"--variant {variant!r} is not one of Table 1's variants: "
                              f"{', '.join(VARIANTS)}")
        for flag, probability in (("--mask-prob", mask_prob), ("--plain-lm-prob", plain_lm_prob)):
            if not 0.0 <= float(probability) <= 1.0:
                raise ConfigError(f"{flag} {probability} is not a probability in [0, 1]")
        defaults = VARIANTS[variant]
        given = {"n_mask": n_mask, "n_bidir": n_bidir, "n_predict": n_predict}
        rules = {knob: CountRule.parse(knob, getattr(defaults, knob) if text is None else text)
                 for knob, text in given.items()}
        return cls(mask_prob=float(mask_prob), plain_lm_prob=float(plain_lm_prob), **rules)

    @classmethod
    def from_task_config(cls, cfg) -> "ObjectiveSampler":
        """The sampler of a ``bidirectional_lm`` task config (the dataclass, or the dict saved
        in a checkpoint's ``cfg.task``)."""
        def get(key, default=None):
            return cfg.get(key, default) if hasattr(cfg, "get") else getattr(cfg, key, default)

        return cls.from_flags(str(get("variant")), mask_prob=float(get("mask_prob", 0.15)),
                              plain_lm_prob=float(get("plain_lm_prob", 0.1)),
                              n_mask=get("n_mask"), n_bidir=get("n_bidir"),
                              n_predict=get("n_predict"))

    def draw(self, n: int, rng: np.random.Generator) -> DocumentObjective:
        """Draw the knobs of a document of ``n >= 1`` tokens."""
        plain_lm = bool(rng.random() < self.plain_lm_prob)
        env = {"n": n}
        if plain_lm:
            env.update(n_mask=0, n_bidir=0)
        else:
            env["n_mask"] = self.n_mask.draw(env, rng, self.mask_prob)
            env["n_bidir"] = self.n_bidir.draw(env, rng, self.mask_prob)
        env["n_predict"] = self.n_predict.draw(env, rng, self.mask_prob)
        objective = DocumentObjective(plain_lm=plain_lm, **env)
        self._check_hidden(objective)
        return objective

    def expected_predicted_share(self, lengths, rng: np.random.Generator) -> float:
        """The share of a corpus's tokens that get a loss, ``sum_d n_predict(d) / sum_d n_d``,
        one draw of the knobs per document of ``lengths`` (documents of 0 tokens skipped):
        the share of the tokens the output projection runs on, which sets a variant's training
        FLOPs per token (NxtUni 1; MskBi about ``(1 - plain_lm_prob) * mask_prob``)."""
        predicted = total = 0
        for n in lengths:
            if int(n) < 1:
                continue
            predicted += self.draw(int(n), rng).n_predict
            total += int(n)
        if total == 0:
            raise ValueError("no document of at least one token to draw the objective on")
        return predicted / total

    def trained_capabilities(self, n: int = 64) -> FrozenSet[str]:
        """What documents of ``n`` tokens train: ``"mask"`` (masked-token targets), ``"next"``
        (next-token targets) and ``"bidir"`` (a bidirectional prefix), from the knobs' ranges.
        Evaluation uses it to refuse modes a model was never trained for (e.g. perplexity on
        ``msk_*``, footnote 5, or direct infilling on ``nxt_*``)."""
        cases = [(0, 0)] if self.plain_lm_prob > 0.0 else []
        if self.plain_lm_prob < 1.0:
            low, high = self.n_mask.bounds({"n": n}, self.mask_prob)
            for m in sorted({low, high, (low + high) // 2}):
                b_low, b_high = self.n_bidir.bounds({"n": n, "n_mask": m}, self.mask_prob)
                cases.extend((m, b) for b in sorted({b_low, b_high}))
        capabilities = set()
        for m, b in cases:
            _, predict_high = self.n_predict.bounds({"n": n, "n_mask": m, "n_bidir": b},
                                                    self.mask_prob)
            if m > 0 and predict_high > 0:
                capabilities.add("mask")
            if predict_high > m:
                capabilities.add("next")
            if b > 0 and predict_high > 0:
                capabilities.add("bidir")
        return frozenset(capabilities)

    def _check_hidden(self, doc: DocumentObjective) -> None:
        safe = largest_safe_n_predict(doc.n, doc.n_mask, doc.n_bidir)
        if doc.n_predict > safe:
            raise ConfigError(
                f"{self.n_predict.describe()} gives n_predict={doc.n_predict} for a document of "
                f"n={doc.n} tokens with n_mask={doc.n_mask} ({self.n_mask.describe()}) and "
                f"n_bidir={doc.n_bidir} ({self.n_bidir.describe()}): positions would attend to "
                f"their own next-token targets (footnote 1 of the paper); n_predict may be at most "
                f"max(n_mask, n-n_bidir)+1 = {safe}")

    def check_targets_stay_hidden(self, longest_document: int) -> None:
        """Setup check of every document length ``1..longest_document``: each knob's range is
        non-empty, and no draw lets a position see its target (:func:`largest_safe_n_predict`).
        Exhaustive up to :data:`EXHAUSTIVE_CHECK_LENGTH`; beyond, at the breakpoints of the
        expressions (their constants, ``n`` minus them, the ends of each range)."""
        literals = set()
        for rule in (self.n_mask, self.n_bidir, self.n_predict):
            literals |= rule.expression.literals()
        lengths = set(range(1, min(longest_document, EXHAUSTIVE_CHECK_LENGTH) + 1))
        if longest_document > EXHAUSTIVE_CHECK_LENGTH:
            lengths |= {value + delta for value in literals | {64, 128, 256, 512, 1024, 2048}
                        for delta in (-2, -1, 0, 1, 2)}
            lengths |= {longest_document - delta for delta in range(3)}
            lengths = {n for n in lengths if 1 <= n <= longest_document}

        def candidates(bounds: Bounds, n: int):
            low, high = bounds
            if n <= EXHAUSTIVE_CHECK_LENGTH:
                return range(low, high + 1)
            points = {low, high, n // 2}
            for anchor in literals | {0, n}:
                points |= {anchor + delta for delta in (-2, -1, 0, 1, 2)}
                points |= {n - anchor + delta for delta in (-2, -1, 0, 1, 2)}
            return sorted(value for value in points if low <= value <= high)

        for n in sorted(lengths):
            cases = []
            if self.plain_lm_prob > 0.0:
                cases.append((0, 0))
            if self.plain_lm_prob < 1.0:
                for m in candidates(self.n_mask.bounds({"n": n}, self.mask_prob), n):
                    bidir_bounds = self.n_bidir.bounds({"n": n, "n_mask": m}, self.mask_prob)
                    cases.extend((m, b) for b in candidates(bidir_bounds, n))
            for m, b in cases:
                _, highest = self.n_predict.bounds({"n": n, "n_mask": m, "n_bidir": b},
                                                   self.mask_prob)
                self._check_hidden(DocumentObjective(n, m, b, highest, plain_lm=(m, b) == (0, 0)))
