"""The corpus card of an English data-bin: ``python -m fairseq_ext.corpus.english.card DATA_BIN``.

Reads the build's ``corpus.json`` (copied into the data-bin by ``prepare_corpus``) and the
data-bin's ``manifest.json``, counts each source's sentencepiece pieces (its documents encoded
with the data-bin's ``spm.model``, one paragraph at a time), and prints the card as markdown:
each source's package, version, licence, documents, words, pieces, share of the words and what
was dropped (not prose, copies of held-out texts by kind, duplicates), then the held-out index
and the build's seconds. ``--json OUT`` also writes the figures (docs/corpus.md quotes the
committed one).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from ..errors import CorpusError
from .build import CARD_NAME, DOCUMENT_SUFFIX

LEAK_KINDS = ("man-pages", "wordnet", "wordnet-definition-opening", "fortunes",
              "debian-descriptions")


def source_pieces(corpus: Path, spm_model: Path) -> Counter:
    """{source: sentencepiece pieces of its documents} (a document's source is its folder)."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=str(spm_model))
    pieces: Counter = Counter()
    for path in sorted(corpus.rglob(f"*{DOCUMENT_SUFFIX}")):
        source = path.relative_to(corpus).parts[0]
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line]
        pieces[source] += sum(len(ids) for ids in processor.encode(lines))
    return pieces


def card_figures(data_bin: Path) -> dict:
    card_path, manifest_path = data_bin / CARD_NAME, data_bin / "manifest.json"
    for path in (card_path, manifest_path, data_bin / "spm.model"):
        if not path.is_file():
            raise CorpusError(f"{data_bin}: no {path.name} (a data-bin of scripts/prepare_corpus.sh "
                              "--source english)")
    card = json.loads(card_path.read_text())
    manifest = json.loads(manifest_path.read_text())
    corpus = Path(card["folder"])
    if not corpus.is_dir():
        raise CorpusError(f"{corpus}: the corpus folder of {data_bin} is gone; rebuild it with "
                          "scripts/prepare_corpus.sh")
    pieces = source_pieces(corpus, data_bin / "spm.model")
    for row in card["sources"]:
        row["pieces"] = pieces.get(row["name"], 0)
    summary = manifest["summary"]
    return {"card": card, "training_pieces": summary["tokens"]["train"],
            "split_tokens": summary["tokens"], "documents": summary["documents"],
            "pipeline_seconds": summary["seconds"]}


def markdown(figures: dict) -> str:
    card = figures["card"]
    lines = ["| source | register | package (version) | licence | documents | words | pieces | "
             "share | not prose | leaks (man, WordNet, WN opening, fortunes, Debian) | "
             "duplicates |", "|" + "---|" * 4 + "---:|" * 7]
    for row in card["sources"]:
        leaks = ", ".join(str(row.get(f"leaks_{kind}", 0)) for kind in LEAK_KINDS)
        lines.append(
            f"| {row['name']} | {row['register']} | {row['package']} ({row['version']}) | "
            f"{row['licence']} | {row.get('documents', 0):,} | {row.get('words', 0):,} | "
            f"{row['pieces']:,} | {100 * row['share']:.1f}% | "
            f"{row.get('paragraphs_not_prose', 0):,} | {leaks} | "
            f"{row.get('paragraphs_duplicate', 0):,} |")
    total_pieces = sum(row["pieces"] for row in card["sources"])
    lines.append(f"| **total** | | | | {card['documents']:,} | {card['words']:,} | "
                 f"{total_pieces:,} | | | | |")
    held = card["held_out"]
    sizes = ", ".join(f"{kind} {next(iter(value.values())):,}" for kind, value in
                      held["sizes"].items())
    seconds = {**card["seconds"], **{k: v for k, v in figures["pipeline_seconds"].items()
                                    if k != "corpus"}}
    lines += ["", f"Training pieces (train split, fairseq's count without `</s>`): "
              f"{figures['training_pieces']:,}; documents train/valid/test: "
              + "/".join(str(figures["documents"][split]) for split in ("train", "valid", "test")),
              f"Held out (packages {', '.join(f'{p} {v}' for p, v in held['packages'].items())}; "
              f"{held['translation_lists']} Translation-en lists): {sizes} (windows of 13 words; "
              "openings of 10)",
              "Seconds: " + ", ".join(f"{step} {value:.1f}" for step, value in seconds.items()
                                      if value is not None)]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fairseq_ext.corpus.english.card",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("data_bin", type=Path)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    try:
        figures = card_figures(args.data_bin)
    except CorpusError as error:
        print(f"card: error: {error}", file=sys.stderr)
        return 2
    print(markdown(figures))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
