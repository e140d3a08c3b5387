"""The pinned package lists (fairseq_ext/corpus/apt_lists.py) and the fetches that use them,
with fake apt programs (tests/apt_fakes.py): what apt is told, what is cached, what is fetched
again."""
import json
import shutil
import subprocess

import pytest
from apt_fakes import install_fake_apt, logged_calls

from fairseq_ext.corpus import apt_lists, python_docs
from fairseq_ext.corpus.errors import CorpusError


def make_deb(root, package, version, subdir, file_name="a.txt"):
    """A tiny .deb of ``package`` at ``version`` holding ``subdir/file_name``."""
    tree = root / f"{package}-{version}"
    (tree / subdir).mkdir(parents=True)
    (tree / subdir / file_name).write_text(f"{package} {version}\n")
    (tree / "DEBIAN").mkdir()
    (tree / "DEBIAN" / "control").write_text(
        f"Package: {package}\nVersion: {version}\nArchitecture: all\n"
        "Maintainer: test <test@example.org>\nDescription: test package\n")
    deb = root / f"{package}_{version.replace(':', '%3a')}_all.deb"
    subprocess.run(["dpkg-deb", "--build", "--root-owner-group", str(tree), str(deb)],
                   check=True, capture_output=True)
    return deb


needs_dpkg = pytest.mark.skipif(shutil.which("dpkg-deb") is None,
                                reason="needs dpkg-deb (Debian/Ubuntu)")


def test_release_fields_and_deb_file_versions():
    text = ("-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA256\n\nOrigin: Debian\n"
            "Label: Debian\nSuite: oldstable\nVersion: 12.15\nCodename: bookworm\n"
            "Date: Sat, 11 Jul 2026 10:16:37 UTC\n\nSHA256:\n")
    # the PGP armour's header is skipped; the fields stop at the paragraph's end
    assert apt_lists.release_fields(text) == apt_lists.release_fields(text.split("\n\n", 1)[1]) == {
        "Origin": "Debian", "Suite": "oldstable", "Version": "12.15", "Codename": "bookworm",
        "Date": "Sat, 11 Jul 2026 10:16:37 UTC"}
    assert apt_lists.deb_file_version("dict-gcide_0.48.5+nmu2_all.deb") == "0.48.5+nmu2"
    assert apt_lists.deb_file_version("fortunes_1%3a1.99.1-7.3_all.deb") == "1:1.99.1-7.3"
    assert apt_lists.deb_file_version("emacs-common_1%3A28.2+1-15+deb12u4_all.deb") == \
        "1:28.2+1-15+deb12u4"


def test_the_lists_are_fetched_once_into_the_cache_and_name_only_bookworm_main(tmp_path,
                                                                           monkeypatch):
    calls = install_fake_apt(tmp_path, monkeypatch, versions={}, debs={})
    cache = tmp_path / "cache"
    messages = []
    monkeypatch.chdir(tmp_path)
    lists = apt_lists.ensure_lists(cache.relative_to(tmp_path), messages.append)
    assert lists.root == cache / "apt" and lists.root.is_absolute()
    assert (lists.root / "sources.list").read_text() == (
        f"deb [signed-by={apt_lists.KEYRING}] http://deb.debian.org/debian bookworm main\n")
    # every directory apt reads or writes is inside the cache: the machine's lists are not read
    options = lists.options()
    settings = dict(option.split("=", 1) for option in options[1::2])
    assert options[::2] == ["-o"] * len(settings)
    assert settings["Dir::Etc::SourceList"] == str(lists.root / "sources.list")
    for name in ("Dir::Etc::SourceParts", "Dir::State::Lists", "Dir::Cache"):
        assert settings[name].startswith(str(lists.root))
    assert settings["Acquire::Languages"] == "en"
    assert [path.name for path in lists.translation_files()] == [
        "deb.debian.org_debian_dists_bookworm_main_i18n_Translation-en"]
    assert lists.release()["Version"] == "12.15" and lists.release()["Codename"] == "bookworm"
    assert logged_calls(calls) == [["apt-get", "update"]]
    assert any("apt-get update (bookworm main alone" in message for message in messages)
    # a second build reads the kept lists: no apt call
    calls.unlink()
    assert apt_lists.ensure_lists(cache, messages.append) == lists
    assert not calls.exists()


def test_a_failed_update_and_lists_without_translations_are_one_line_errors(tmp_path,
                                                                         monkeypatch):
    install_fake_apt(tmp_path, monkeypatch, versions={}, debs={}, update_fails=True)
    with pytest.raises(CorpusError, match=r"^apt-get update of http://deb.debian.org/debian "
                                          r"bookworm main failed: E: Failed to fetch"):
        apt_lists.ensure_lists(tmp_path / "cache", print)
    assert not apt_lists.AptLists.in_cache(tmp_path / "cache").stamp.exists()
    install_fake_apt(tmp_path, monkeypatch, versions={}, debs={}, no_translations=True)
    with pytest.raises(CorpusError, match="wrote no Translation-en list"):
        apt_lists.ensure_lists(tmp_path / "cache2", print)
    monkeypatch.setattr(apt_lists, "KEYRING", tmp_path / "missing.gpg")
    with pytest.raises(CorpusError, match="install debian-archive-keyring"):
        apt_lists.ensure_lists(tmp_path / "cache3", print)


@needs_dpkg
def test_a_package_is_fetched_at_the_pinned_version_and_refetched_when_the_cache_holds_another(
        tmp_path, monkeypatch):
    """A cache filled from other lists (here: 2.4.71 from bookworm-security) is fetched again
    at the pinned lists' version; the same version is reused without a download."""
    subdir = "usr/share/doc/apache2-doc/manual"
    pinned = make_deb(tmp_path, "apache2-doc", "2.4.68-1~deb12u1", subdir)
    calls = install_fake_apt(tmp_path, monkeypatch, versions={"apache2-doc": "2.4.68-1~deb12u1"},
                             debs={"apache2-doc": pinned})
    cache = tmp_path / "cache"
    (cache / "apache2-doc" / subdir).mkdir(parents=True)
    (cache / "apache2-doc.stamp.json").write_text(
        json.dumps({"package_file": "apache2-doc_2.4.71-1~deb12u1_all.deb"}))
    messages = []
    folder, fetched = python_docs.ensure_package("apache2-doc", subdir, cache, messages.append)
    assert fetched and (folder / "a.txt").read_text() == "apache2-doc 2.4.68-1~deb12u1\n"
    assert any(message.startswith("refetch: apache2-doc_2.4.71") for message in messages)
    assert logged_calls(calls) == [["apt-get", "update"],
                                   ["apt-cache", "show", "--no-all-versions", "apache2-doc"],
                                   ["apt-get", "download", "apache2-doc=2.4.68-1~deb12u1"]]
    assert json.loads((cache / "apache2-doc.stamp.json").read_text()) == {
        "package_file": pinned.name, "version": "2.4.68-1~deb12u1"}
    calls.unlink()
    assert python_docs.ensure_package("apache2-doc", subdir, cache, messages.append,
                                      version="2.4.68-1~deb12u1") == (folder, False)
    assert not calls.exists()  # the version was given and matches: no apt call at all
    with pytest.raises(CorpusError, match="hold no wordnet-base"):
        python_docs.ensure_package("wordnet-base", "usr/share/wordnet", cache, print)


def test_the_pinned_records_are_what_the_leak_filter_and_debsection_read(tmp_path, monkeypatch):
    from fairseq_ext.corpus.downstream_sources import pinned_packages_text, read_translations
    from fairseq_ext.corpus.english import leaks

    install_fake_apt(tmp_path, monkeypatch, versions={}, debs={})
    lists = apt_lists.ensure_lists(tmp_path / "cache", print)
    assert "Package: a" in pinned_packages_text(lists)
    texts, translation_lists = leaks.debian_descriptions(lists)
    assert translation_lists == 1
    assert sorted(texts) == ["a tool\n more about it", "b tool\n more about b"]
    assert read_translations(lists.translation_files()) == {"00": "b tool\n more about b"}
