"""scripts/prepare_downstream.sh (fairseq_ext.corpus.downstream): Debian package descriptions,
WordNet glosses and fortunes -> sentence_prediction data-bins, with the overlap check and the
baselines.

The sources are small real samples in tests/data/downstream/ (see its README); the pre-training
data-bin is a tiny one made here (a sentencepiece model trained on the samples' text, its
dictionary, and prep/{train,valid,test}.txt of made-up documents).
"""
import collections
import json
import random

import pytest

from conftest import REPO_ROOT, write_documents
from fairseq_ext.corpus import downstream as ds
from fairseq_ext.corpus import downstream_sources as sources

SAMPLES = REPO_ROOT / "tests/data/downstream"
SIZES = ["--train-size", "24", "--dev-size", "12", "--selection-size", "6"]


def sample_args(out_dir=None, data_bin=None, *extra):
    return ([str(data_bin), str(out_dir)] if data_bin else []) + [
        "--fortunes-dir", str(SAMPLES / "fortunes"), "--wordnet-dir", str(SAMPLES / "wordnet"),
        "--packages-file", str(SAMPLES / "Packages"),
        "--translations-file", str(SAMPLES / "Translation-en"), "--workers", "1", *extra]


def debian_sample():
    packages = (SAMPLES / "Packages").read_text()
    return sources.debian_examples(packages, sources.read_translations([SAMPLES / "Translation-en"]))[0]


def wordnet_sample(pos_files=("noun", "verb")):
    synsets = []
    for pos in pos_files:
        for line in (SAMPLES / "wordnet" / f"data.{pos}").read_text().splitlines():
            synset = sources.parse_synset(line, pos)
            if synset:
                synsets.append(synset)
    return synsets


@pytest.fixture(scope="module")
def pretraining_bin(tmp_path_factory):
    """spm.model + dict.txt (trained on the samples' text and made-up documents) and the
    pre-training text in prep/."""
    from fairseq_ext.corpus.encoders import train_sentencepiece, write_sentencepiece_dictionary

    root = tmp_path_factory.mktemp("downstream_pretraining")
    dest = root / "data-bin"
    (dest / "prep").mkdir(parents=True)
    write_documents(dest / "prep" / "train.txt", 40, seed=3)
    write_documents(dest / "prep" / "valid.txt", 4, seed=4)
    write_documents(dest / "prep" / "test.txt", 4, seed=5)
    text = root / "spm_train.txt"
    lines = (dest / "prep" / "train.txt").read_text().splitlines()
    for path in [SAMPLES / "Translation-en", *sorted((SAMPLES / "fortunes").iterdir()),
                 *sorted((SAMPLES / "wordnet").iterdir())]:
        lines += path.read_text().splitlines()
    text.write_text("\n".join(line for line in lines if line.strip()) + "\n")
    train_sentencepiece(text, dest / "spm.model", vocab_size=400, model_type="unigram",
                        character_coverage=1.0, input_sentence_size=100000, threads=1)
    write_sentencepiece_dictionary(dest / "spm.model", dest / "dict.txt")
    return dest


@pytest.fixture(scope="module")
def built(pretraining_bin, tmp_path_factory):
    """OUT_DIR of a build of the three tasks on the samples, and its stdout."""
    import contextlib
    import io

    out = tmp_path_factory.mktemp("downstream") / "out"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert ds.main(sample_args(out, pretraining_bin, *SIZES)) == 0
    return out, stdout.getvalue()


# --- builders ------------------------------------------------------------------------------

def test_debian_descriptions_and_sections_as_read_by_hand():
    examples = {e.inputs[0].split(".")[0]: e for e in debian_sample()}
    assert examples["DNS Lookup Utility"].label == "net"
    assert examples["DNS Lookup Utility"].inputs[0] == (
        "DNS Lookup Utility. This package provides the 'host' DNS lookup utility in the form that "
        "is bundled with the BIND 9 sources.")
    assert examples["DNS Lookup Utility"].group == "source:bind9"
    assert examples["peg elimination solitaire game"].label == "games"
    # only the chosen sections (the sample has libs and python packages too)
    assert collections.Counter(e.label for e in examples.values()) == {
        section: 5 for section in sources.SECTIONS}


def test_debian_long_description_first_paragraph_and_area_prefix():
    record = ("Package: foo\nSection: contrib/sound\nDescription: a synth\n"
              " First paragraph,\n on two lines.\n .\n Second paragraph.\n")
    (example,), notes = sources.debian_examples(record, {})
    assert example == sources.Example(("a synth. First paragraph, on two lines.",), "sound",
                                 group="source:foo")
    assert notes == {"records_without_long_description": 0}


def test_debian_without_long_descriptions_says_how_to_get_them():
    with pytest.raises(ds.CorpusError, match="apt-get update -o Acquire::Languages=en"):
        sources.debian_examples((SAMPLES / "Packages").read_text(), {})


def test_fortunes_as_read_by_hand():
    examples = sources.fortune_examples(SAMPLES / "fortunes")
    by_text = {e.inputs[0]: e.label for e in examples}
    # the attribution line "-- Joe Martin" is dropped, the lines joined
    assert by_text["One of the most overlooked advantages to computers is... If they do foul up, "
                   "there's no law against whacking them around a little."] == "computers"
    assert by_text["You're never too old to become younger."] == "people"
    assert not any("--" in text for text in by_text)
    assert collections.Counter(by_text.values()) == {c: 8 for c in sources.CATEGORIES}  # not art
    assert sources.clean_fortune('"Quote."\n\t\t-- A. Person, on closing\n\t\t   the Chamber.\nMore.') == (
        '"Quote." More.')


def test_wordnet_lemmas_and_definitions_as_read_by_hand():
    synsets = {s.offset: s for s in wordnet_sample()}
    assert synsets["01824035"] == sources.Synset(
        "noun", "01824035", ("roadrunner", "chaparral cock", "Geococcyx californianus"),
        "speedy largely terrestrial bird found from California and Mexico to Texas",
        5)  # lex_filenum 05: noun.animal
    assert synsets["00095329"].definition == "something done or paid in expiation of a wrong"
    assert synsets["02704213"].lemmas == ("line up",)
    assert len(synsets) == 76  # the license header is skipped
    assert sources.parse_synset("00001740 00 a 01 able(p) 0 000 | having means; \"able to swim\"",
                           "adj") == sources.Synset("adj", "00001740", ("able",), "having means", 0)


def test_gloss_topics_are_noun_definitions_labelled_with_their_lexicographer_file():
    examples = sources.gloss_topic_examples(wordnet_sample())
    # the samples' noun lines of files 05, 06, 13, 15, 18, 20 (verbs and other files left out)
    assert collections.Counter(e.label for e in examples) == {
        "animal": 6, "artifact": 6, "food": 7, "location": 7, "person": 6, "plant": 6}
    by_text = {e.inputs: e.label for e in examples}
    assert by_text[("speedy largely terrestrial bird found from California and Mexico to "
                    "Texas",)] == "animal"
    assert by_text[("regions adjacent to the tropics",)] == "location"  # 08674344 15
    assert all(len(e.inputs) == 1 for e in examples)  # the definition alone, no lemma
    assert sources.GLOSS_TOPICS[13] == "food" and len(sources.GLOSS_TOPICS) == 6


def test_gloss_pairs_balanced_split_by_synset_no_copy_cue():
    synsets = wordnet_sample()
    train, dev, report = ds.split_pairs(synsets, 16, 8, seed=1, corpus=None)
    assert collections.Counter(e.label for e in dev) == {"match": 4, "other": 4}
    assert collections.Counter(e.label for e in train) == {"match": 8, "other": 8}
    by_definition = {s.definition: s for s in synsets}
    for example in train + dev:
        lemma, definition = example.inputs
        owner = by_definition[definition]
        assert (lemma in owner.lemmas) == (example.label == "match")
        assert not sources.lemma_in(lemma, definition)
    # no definition of a dev example appears in train; each shown once
    dev_definitions = [e.inputs[1] for e in dev]
    assert not set(dev_definitions) & {e.inputs[1] for e in train}
    assert len(set(dev_definitions)) == len(dev_definitions)
    assert ds.split_pairs(synsets, 16, 8, seed=1, corpus=None)[:2] == (train, dev)


def test_single_split_balanced_deterministic_disjoint():
    examples, dedup = ds.deduplicate(sources.fortune_examples(SAMPLES / "fortunes"))
    train, dev, _ = ds.split_single(examples, 24, 12, seed=1, corpus=None)
    assert collections.Counter(e.label for e in dev) == {c: 2 for c in sources.CATEGORIES}
    assert collections.Counter(e.label for e in train) == {c: 4 for c in sources.CATEGORIES}
    assert not {e.key for e in dev} & {e.key for e in train}
    assert ds.split_single(examples, 24, 12, seed=1, corpus=None)[:2] == (train, dev)
    assert ds.split_single(examples, 24, 12, seed=2, corpus=None)[:2] != (train, dev)


def test_deduplicate_normalized_text_and_label_conflicts():
    examples = [sources.Example(("Hello, World!",), "a"), sources.Example(("hello world",), "a"),
                sources.Example(("Same text",), "a"), sources.Example(("same  TEXT.",), "b"),
                sources.Example(("other",), "b")]
    kept, stats = ds.deduplicate(examples)
    assert [e.inputs[0] for e in kept] == ["Hello, World!", "other"]
    assert stats == {"duplicates": 1, "label_conflicts": 2}


def test_overlap_with_pretraining_corpus_removed_and_reported(tmp_path):
    examples, _ = ds.deduplicate(debian_sample())
    train, dev, report = ds.split_single(examples, 24, 12, seed=1, corpus=None)
    assert report["removed"]["dev_in_pretraining_line"] == 0
    exact, windowed = dev[0].inputs[0], dev[1].inputs[0]
    window = " ".join(sources.normalize(windowed).split()[2:2 + ds.NGRAM])
    # planted in the pre-training text too: one train text whole, one by a window
    train_exact, train_windowed = train[0].inputs[0], train[1].inputs[0]
    train_window = " ".join(sources.normalize(train_windowed).split()[1:1 + ds.NGRAM])
    corpus_file = tmp_path / "train.txt"
    corpus_file.write_text(f"Some other line.\n{exact.upper()}\nbefore {window} after\n"
                           f"{train_exact}\nand {train_window} too\n")
    corpus = ds.CorpusIndex([corpus_file])
    assert corpus.overlap(exact) == "line" and corpus.overlap(windowed) == "window"
    assert corpus.overlap(dev[2].inputs[0]) is None
    train2, dev2, report2 = ds.split_single(examples, 24, 12, seed=1, corpus=corpus)
    assert report2["removed"]["dev_in_pretraining_line"] == 1
    assert report2["removed"]["dev_in_pretraining_window"] == 1
    assert report2["removed"]["train_in_pretraining_line"] == 1
    assert report2["removed"]["train_in_pretraining_window"] == 1
    assert exact not in {e.inputs[0] for e in dev2} and windowed not in {e.inputs[0] for e in dev2}
    assert not {train_exact, train_windowed} & {e.inputs[0] for e in train2}
    assert ds.overlap_figures(train2, dev2, corpus) == {
        "dev_in_train": 0, "dev_in_pretraining": 0, "train_in_pretraining": 0}
    before = ds.overlap_figures(train, dev, corpus)
    assert before["dev_in_pretraining"] == 2 and before["train_in_pretraining"] == 2


# --- baselines -----------------------------------------------------------------------------

def test_majority_baseline_by_hand():
    result = ds.majority_baseline(["a", "b", "b", "c"], ["b", "a", "b", "c", "b"])
    assert result["label"] == "b" and result["accuracy"] == pytest.approx(3 / 5)
    assert result["se"] == pytest.approx((0.6 * 0.4 / 5) ** 0.5)
    assert ds.majority_baseline(["y", "x"], ["x", "y", "y"])["label"] == "x"  # ties: by name


def test_bow_logreg_beats_majority_on_separable_toy():
    rng = random.Random(0)
    words = {"pos": ["sunny", "bright", "warm"], "neg": ["rainy", "dark", "cold"]}

    def make(n):
        return [sources.Example((" ".join(rng.choice(words[lb]) for _ in range(4)) + " day",), lb)
                for lb in ("pos", "neg") for _ in range(n)]
    train, dev = make(20), make(10)
    result = ds.bow_logreg_baseline(train, dev)
    assert result["accuracy"] == 1.0 > ds.majority_baseline(
        [e.label for e in train], [e.label for e in dev])["accuracy"]
    assert result["library"].startswith("scikit-learn ")
    pairs = [sources.Example((a, b), "match" if (a == "xx") == (b == "yy") else "other")
             for a in ("xx", "zz") for b in ("yy", "ww") for _ in range(5)]
    assert ds.bow_logreg_baseline(pairs, pairs)["n"] == 20  # separate vectorizers per input


# --- the command -----------------------------------------------------------------------------

def test_databins_read_by_fairseq_sentence_prediction(built):
    from fairseq.tasks.sentence_prediction import SentencePredictionConfig, SentencePredictionTask

    out, stdout = built
    summary = json.loads((out / "downstream.json").read_text())
    # the default suite: GlossPair is built only when named
    assert set(summary["tasks"]) == {"DebSection", "GlossTopic", "FortuneTopic"}
    assert summary["builder_version"] == ds.BUILDER_VERSION
    for name, n_inputs in (("DebSection", 1), ("GlossTopic", 1), ("FortuneTopic", 1)):
        task_summary = summary["tasks"][name]
        assert task_summary["overlap"]["dev_in_train"] == 0
        assert task_summary["overlap"]["dev_in_pretraining"] == 0
        assert task_summary["overlap"]["train_in_pretraining"] == 0
        assert f"{name}: train " in stdout
        assert not (out / "selection").exists()  # the selection rows are the bin's valid1
        prep = out / "prep" / name
        texts = {split: (prep / f"{split}.raw.input0").read_text().splitlines()
                 for split in ("train", "valid", "valid1")}
        # the three splits are disjoint; the selection split has equal classes
        assert not set(texts["valid1"]) & (set(texts["train"]) | set(texts["valid"]))
        selection_labels = collections.Counter((prep / "valid1.label").read_text().splitlines())
        assert len(set(selection_labels.values())) == 1
        data = out / f"{name}-bin"
        split_sizes = {"train": task_summary["sizes"]["train"],
                       "valid": task_summary["sizes"]["dev"],
                       "valid1": task_summary["sizes"]["selection"]}
        assert sorted(p.name for p in data.iterdir() if p.is_dir()) == sorted(
            [f"input{i}" for i in range(n_inputs)] + ["label"])
        cfg = SentencePredictionConfig(data=str(data), num_classes=task_summary["num_classes"],
                                       regression_target=False, seed=1,
                                       classification_head_name="head")
        task = SentencePredictionTask.setup_task(cfg)
        for split, rows in split_sizes.items():
            task.load_dataset(split)
            dataset = task.dataset(split)
            labels = (prep / f"{split}.label").read_text().splitlines()
            assert len(dataset) == rows == len(labels)
            names = [task.label_dictionary[int(dataset[i]["target"]) + task.label_dictionary.nspecial]
                     for i in range(len(dataset))]
            assert names == labels
    fortunes = summary["tasks"]["FortuneTopic"]["sizes"]
    assert (fortunes["train"], fortunes["selection"]) == (24, 6)  # 8 a category: 5 + 1 each


def test_corpus_fingerprint_by_hand(tmp_path):
    """The stamp check's digest: the files' lines in order, decoded as UTF-8 with bad bytes
    replaced (U+FFFD), re-encoded."""
    import hashlib

    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_bytes("caf\u00e9 line\n".encode() + b"bad \xff byte\n")
    second.write_text("second file, no newline at the end")
    hand = hashlib.sha256("caf\u00e9 line\nbad \ufffd byte\nsecond file, no newline at the "
                          "end".encode()).hexdigest()
    assert ds.corpus_fingerprint([first, second]) == hand
    assert ds.corpus_fingerprint([first, second]) != ds.corpus_fingerprint([second, first])


def test_rerun_skips_and_other_settings_are_refused(built, pretraining_bin, capsys, monkeypatch):
    out, _ = built
    stamp = out / "GlossTopic-bin" / "input0" / "train.bin"
    before = stamp.stat().st_mtime_ns

    def no_index(*args, **kwargs):
        raise AssertionError("a re-run that builds nothing indexes no corpus windows")

    monkeypatch.setattr(ds, "CorpusIndex", no_index)
    assert ds.main(sample_args(out, pretraining_bin, *SIZES, "GlossTopic")) == 0
    assert "skip (already built with these settings): GlossTopic" in capsys.readouterr().out
    assert stamp.stat().st_mtime_ns == before
    assert ds.main(sample_args(out, pretraining_bin, *SIZES, "GlossTopic", "--seed", "2")) == 2
    error = capsys.readouterr().err
    assert error.startswith("prepare_downstream.sh: error: ") and error.count("\n") == 1
    assert "was built with other settings (seed, source_sha256)" not in error  # source unchanged
    assert "was built with other settings (seed)" in error and "--force" in error
    assert "another OUT_DIR" in error
    assert stamp.stat().st_mtime_ns == before
    # a bin of an older builder version is named as such, and kept
    stamp_file = out / "GlossTopic-bin" / ds.STAMP
    saved = stamp_file.read_text()
    older = json.loads(saved)
    older["settings"]["builder_version"] = 1
    stamp_file.write_text(json.dumps(older))
    assert ds.main(sample_args(out, pretraining_bin, *SIZES, "GlossTopic")) == 2
    error = capsys.readouterr().err
    assert "built by an older scripts/prepare_downstream.sh (builder version 1" in error
    assert "--force" in error and stamp.stat().st_mtime_ns == before
    stamp_file.write_text(saved)


@pytest.mark.parametrize("flag, message", [
    ("--fortunes-dir", "fortunes: {path} has no category files; install them: "
                       "apt-get install fortunes fortunes-min (or pass --fetch)"),
    ("--wordnet-dir", "wordnet: no {path}/data.noun; install it: apt-get install wordnet-base "
                      "(or pass --fetch)"),
])
def test_missing_source_says_what_to_install(flag, message, pretraining_bin, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    task = "FortuneTopic" if flag == "--fortunes-dir" else "GlossTopic"
    argv = sample_args(tmp_path / "out", pretraining_bin, task) + [flag, str(empty)]
    assert ds.main(argv) == 2
    error = capsys.readouterr().err
    assert error == f"prepare_downstream.sh: error: {message.format(path=empty)}\n"
    assert not (tmp_path / "out").exists()


def test_empty_package_lists_say_run_apt_get_update(monkeypatch, pretraining_bin, tmp_path, capsys):
    import subprocess

    monkeypatch.setattr(sources.shutil, "which", lambda name: "/usr/bin/apt-cache")
    monkeypatch.setattr(sources.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, 0, b"", b""))
    argv = [str(pretraining_bin), str(tmp_path / "out"), "DebSection"]
    assert ds.main(argv) == 2
    assert capsys.readouterr().err == (
        "prepare_downstream.sh: error: debian packages: apt-cache dumpavail lists no packages; "
        "run apt-get update (package lists are empty)\n")


def test_fetch_reads_debsection_from_the_pinned_lists_not_the_machines(tmp_path, monkeypatch):
    """With --fetch and no --packages-file, DebSection's records and long descriptions are the
    lists fetched into --cache-dir/apt (here the samples, served by a fake apt-get), the same
    examples as the samples read directly."""
    from apt_fakes import install_fake_apt, logged_calls

    calls = install_fake_apt(tmp_path, monkeypatch, versions={}, debs={},
                             packages_text=(SAMPLES / "Packages").read_text(),
                             translations_text=(SAMPLES / "Translation-en").read_text())
    args = ds.build_parser().parse_args(["data-bin", "out", "DebSection", "--fetch",
                                         "--cache-dir", str(tmp_path / "cache")])
    examples, notes = ds.source_examples("DebSection", args)
    assert examples == debian_sample()
    assert logged_calls(calls) == [["apt-get", "update"]]
    # without --fetch the machine's lists are read, as before (here: the given files)
    args = ds.build_parser().parse_args(["data-bin", "out", "DebSection", *sample_args()[-6:-2]])
    assert ds.source_examples("DebSection", args)[0] == debian_sample()
