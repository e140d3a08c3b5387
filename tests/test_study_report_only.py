"""Every committed study summary (``git ls-files '*study.json'``) renders byte-identically
through the report path of :mod:`fairseq_ext_lab.studies`.

There is no ``--report-only`` option and no finished run's ``result.json`` is committed (the
runs directories stay on the machine that trained them), so a summary cannot be regenerated
from its runs here. What is checked instead, for each committed ``study.json``:

* the text report (:func:`~fairseq_ext_lab.studies.render.format_report`, and
  :func:`~fairseq_ext_lab.studies.render.format_finetune` where it has a fine-tuning
  section), the docs' markdown rows (``markdown_claims``, ``markdown_finetune``) and the
  figures for ``--compare`` (``study_figures``) hash to :data:`RENDERED`, the SHA-256 (first 16
  hex digits) of what the renderer prints for the file;
* a summary with a ``figures`` section is what the writer
  (:func:`~fairseq_ext_lab.studies.cli.report_study`) writes for it: its figures
  recomputed from the summary and the summary dumped again give the committed bytes.

A deliberate change of the rendering updates :data:`RENDERED` (the failure prints the new
digest). docs/studies.md's quotations of the claim rows are checked in tests/test_figures.py.
"""
import dataclasses
import hashlib
import json
import subprocess

import pytest

from conftest import REPO_ROOT
from fairseq_ext_lab import studies
from fairseq_ext_lab.reporting import figures

RENDERED = {
    # the CPU rehearsal of the GPU study (one seed of 4 updates; docs/benchmarks.md)
    "docs/gpu_rehearsal/2026-11-28/study/study.json": {
        "text": "0da7365923e949d3",
        "finetune": "e618fa3a6a2aacb1",
        "markdown": "14ec0e00f64f11a9",
        "markdown_finetune": "1642144e30d37701",
        "figures": "e65f086910c04e82",
    },
    "docs/gpu_rehearsal/2026-12-07/study/study.json": {
        "text": "2aa01c4767163c62",
        "finetune": "943c3081ba148c58",
        "markdown": "9354cae5489a0f1f",
        "markdown_finetune": "6ee5dfaf7a89e2d0",
        "figures": "ded6fd78ffc6b8b5",
    },
    "docs/studies/2026-11-26/3ml/study.json": {
        "text": "cf2b37d2d163cc24",
        "finetune": "e3b0c44298fc1c14",
        "markdown": "fab3763edf221501",
        "markdown_finetune": "e3b0c44298fc1c14",
        "figures": "ccf7b196a4824559",
    },
    "docs/studies/2026-11-26/bidirectional/study.json": {
        "text": "1d36686c43ba27f0",
        "finetune": "e3b0c44298fc1c14",
        "markdown": "498d36c62142b44e",
        "markdown_finetune": "e3b0c44298fc1c14",
        "figures": "7805675d76aff474",
    },
    "docs/studies/2026-11-26/swishrnn/study.json": {
        "text": "8c3c277ad73d9b99",
        "finetune": "e3b0c44298fc1c14",
        "markdown": "e5712ef8795aa73c",
        "markdown_finetune": "e3b0c44298fc1c14",
        "figures": "839bd5224b217057",
    },
    "docs/studies/2026-11-28/bidirectional-finetune-8-seeds/study.json": {  # its first run
        "text": "edca70b3fc802b1d",
        "finetune": "e74c691473932e3d",
        "markdown": "a754e416a7d0b329",
        "markdown_finetune": "aa534f5061360305",
        "figures": "8525519e29294733",
    },
    "docs/studies/2026-11-27/3ml/study.json": {  # archived: 500 dev rows, GlossPair
        "text": "e614f72a9694f987",
        "finetune": "80fa39a18c430126",
        "markdown": "17d99b4a62268b55",
        "markdown_finetune": "9e0cf71f67627526",
        "figures": "aaaa365f0251653f",
    },
    "docs/studies/3ml/study.json": {  # the 1,500-row suite, with random init
        "text": "aee4abadef4b919e",
        "finetune": "be83e161c197bfcb",
        "markdown": "b35e137d2868c192",
        "markdown_finetune": "8bf24af293abe695",
        "figures": "f57d01557c6436be",
    },
    "docs/studies/bidirectional-documents/study.json": {
        "text": "84e3645468437e97",
        "finetune": "e3b0c44298fc1c14",
        "markdown": "c363dfd526320ebe",
        "markdown_finetune": "e3b0c44298fc1c14",
        "figures": "fe3587374ea4c86e",
    },
    "docs/studies/bidirectional-flops/study.json": {
        "text": "3172c27476e26222",
        "finetune": "e3b0c44298fc1c14",
        "markdown": "cd48464ddfa0a4a8",
        "markdown_finetune": "e3b0c44298fc1c14",
        "figures": "c749739fe5686f3d",
    },
    "docs/studies/bidirectional/study.json": {  # on the 1,500-row suite
        "text": "77aa57554e94927e",
        "finetune": "494187c44dc4f640",
        "markdown": "1284912b69b891a3",
        "markdown_finetune": "c5893d0c246879ef",
        "figures": "df1ac9db855e9d5a",
    },
    "docs/studies/2026-11-27/bidirectional/study.json": {  # archived: 500 dev rows, GlossPair
        "text": "77aa57554e94927e",
        "finetune": "ca62f731858d98a9",
        "markdown": "c3a1416cfaddeac7",
        "markdown_finetune": "fbc79fc9fa45a6e3",
        "figures": "2b3d03c2fa1215fd",
    },
    "docs/studies/2026-11-27/swishrnn/study.json": {  # archived: 500 dev rows, GlossPair
        "text": "aa1478184f903885",
        "finetune": "bca137749f833ee1",
        "markdown": "a26cb8839d7ff237",
        "markdown_finetune": "a0b3ccbabec4e240",
        "figures": "0ea417d5290d57f1",
    },
    "docs/studies/bidirectional-finetune/study.json": {  # 16 seeds
        "text": "f9ce40becbacc6a1",
        "finetune": "bee338798617255a",
        "markdown": "a6b56b8303badc44",
        "markdown_finetune": "b883d39360975218",
        "figures": "ae42cf9f91f9c481",
    },
    "docs/studies/swishrnn/study.json": {  # the 1,500-row suite, 5 seeds
        "text": "7aedb2a1e76cb318",
        "finetune": "31e8acaa810509db",
        "markdown": "5ab208d9d86874eb",
        "markdown_finetune": "34a7d3cf067526b7",
        "figures": "b2f5252892233ad3",
    },
}


def committed_summaries():
    try:
        listed = subprocess.run(["git", "ls-files", "*study.json"], cwd=REPO_ROOT,
                                capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: what is on disk
        listed = [str(p.relative_to(REPO_ROOT)) for p in REPO_ROOT.glob("docs/**/study.json")]
    return sorted(listed)


def renderings(report: dict) -> dict:
    study = dataclasses.replace(studies.STUDIES[report["study"]], seeds=tuple(report["seeds"]))
    finetune = report.get("finetune")
    return {
        "text": studies.format_report(study, report),
        "finetune": studies.format_finetune(finetune, len(study.seeds)) if finetune else "",
        "markdown": studies.markdown_claims(report),
        "markdown_finetune": studies.markdown_finetune(report) if finetune else "",
        "figures": json.dumps(studies.study_figures(study, report), default=str),
    }


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def test_every_committed_summary_has_its_renderings_recorded():
    assert committed_summaries() == sorted(RENDERED)


@pytest.mark.parametrize("path", sorted(RENDERED))
def test_a_committed_summary_renders_byte_identically(path):
    report = json.loads((REPO_ROOT / path).read_text())
    got = {name: digest(text) for name, text in renderings(report).items()}
    assert got == RENDERED[path], f"{path}: renderings now hash to {got}"


@pytest.mark.parametrize("path", sorted(RENDERED))
def test_a_committed_summary_is_what_the_writer_writes_for_it(path):
    raw = (REPO_ROOT / path).read_text()
    report = json.loads(raw)
    if figures.FIGURES not in report:
        pytest.skip(f"{path} predates the figures section (an archived summary)")
    study = dataclasses.replace(studies.STUDIES[report["study"]], seeds=tuple(report["seeds"]))
    again = {**report, figures.FIGURES: studies.study_figures(study, report)}
    assert json.dumps(again, indent=2, default=str) == raw
