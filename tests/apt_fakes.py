"""A fake ``apt-get`` / ``apt-cache`` pair for the tests of the pinned package lists: they read
the ``-o Dir::...`` flags as apt does, ``update`` writes a suite's lists into
``Dir::State::Lists``, ``show`` prints the versions a JSON table offers, ``download`` copies a
prepared ``.deb``. Every call is logged, one line each."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

FAKE = r'''#!{python}
import json, os, shutil, sys
from pathlib import Path

state = json.loads(Path({state!r}).read_text())
with open(state["calls"], "a") as calls:
    calls.write(Path(sys.argv[0]).name + " " + " ".join(sys.argv[1:]) + "\n")
options, words, args = {{}}, [], sys.argv[1:]
while args:
    arg = args.pop(0)
    if arg == "-o":
        name, _, value = args.pop(0).partition("=")
        options[name] = value
    else:
        words.append(arg)
command = words[0]
if command == "update":
    if state.get("update_fails"):
        print("E: Failed to fetch http://deb.debian.org/debian/dists/bookworm/InRelease",
              file=sys.stderr)
        sys.exit(100)
    lists = Path(options["Dir::State::Lists"])
    prefix = "deb.debian.org_debian_dists_bookworm"
    (lists / f"{{prefix}}_InRelease").write_text(
        "-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA256\n\n"
        "Origin: Debian\nSuite: oldstable\nCodename: bookworm\nVersion: 12.15\n"
        "Date: Sat, 11 Jul 2026 10:16:37 UTC\n\nSHA256:\n")
    (lists / f"{{prefix}}_main_binary-amd64_Packages").write_text(state["packages_text"])
    if not state.get("no_translations"):
        (lists / f"{{prefix}}_main_i18n_Translation-en").write_text(state["translations_text"])
elif command == "show":
    for package in words[1:]:
        if package in state["versions"]:
            print(f"Package: {{package}}\nVersion: {{state['versions'][package]}}\n")
elif command == "download":
    package, _, version = words[1].partition("=")
    if state["versions"].get(package) != version:
        print(f"E: Version '{{version}}' for '{{package}}' was not found", file=sys.stderr)
        sys.exit(100)
    shutil.copy(state["debs"][package], os.getcwd())
'''


def install_fake_apt(tmp_path: Path, monkeypatch, versions: dict, debs: dict,
                     packages_text: str = "Package: a\nDescription: a tool\n more about it\n",
                     translations_text: str = "Package: b\nDescription-md5: 00\n"
                                              "Description-en: b tool\n more about b\n",
                     **flags) -> Path:
    """``apt-get`` and ``apt-cache`` fakes first on PATH, a keyring where the code looks for
    one; returns the file the calls are logged to."""
    from fairseq_ext.corpus import apt_lists

    state_file = tmp_path / "fake-apt-state.json"
    calls = tmp_path / "apt-calls"
    state_file.write_text(json.dumps({"calls": str(calls), "versions": versions,
                                      "debs": {name: str(path) for name, path in debs.items()},
                                      "packages_text": packages_text,
                                      "translations_text": translations_text, **flags}))
    fake_bin = tmp_path / "fake-bin"
    fake_bin.mkdir(exist_ok=True)
    for name in ("apt-get", "apt-cache"):
        script = fake_bin / name
        script.write_text(FAKE.format(python=sys.executable, state=str(state_file)))
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_bin}{os.pathsep}{os.environ['PATH']}")
    keyring = tmp_path / "debian-archive-keyring.gpg"
    keyring.write_bytes(b"")
    monkeypatch.setattr(apt_lists, "KEYRING", keyring)
    return calls


def logged_calls(calls: Path) -> list[list[str]]:
    """Each logged call as (program, its non-``-o`` words)."""
    out = []
    for line in calls.read_text().splitlines() if calls.exists() else []:
        words, skip = [], False
        for word in line.split():
            if skip:
                skip = False
            elif word == "-o":
                skip = True
            else:
                words.append(word)
        out.append(words)
    return out
