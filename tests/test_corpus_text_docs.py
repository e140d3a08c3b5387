"""The readers of non-HTML documentation (POD, GNU info, reST, plain text, kernel ABI files), on
small synthetic packages written in the real formats."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from fairseq_ext.corpus.english.raw import RawDocument
from fairseq_ext.corpus.english.text_docs import (
    abi_paragraphs,
    info_nodes,
    pod_paragraphs,
    read_abi_files,
    read_info_files,
    read_pod_tree,
    read_rst_tree,
    read_text_files,
    text_paragraphs,
)
from fairseq_ext.corpus.errors import CorpusError


def write(path: Path, text: str, compress: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8")
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


# --- POD -------------------------------------------------------------------------------------------

POD = """\
=encoding utf8

=head1 NAME

perlfoo - the B<foo> manual X<foo>

=head1 DESCRIPTION

This is an ordinary
paragraph with C<< $a->{b} >> and C<print>, see L<perlfunc/open> and
L<the site|https://www.perl.org/>, E<lt>tagE<gt>, I<nested B<bold> text>, F</etc/passwd>,
S<no break>, Z<>caf\u00e9 and L<perlop/"I/O Operators">.

    my $verbatim = "code";
    print $verbatim;

=over 4

=item *

A bullet item's text.

=item open FILEHANDLE

A term item.

=back

=begin html

<p>Dropped HTML.</p>

=end html

=for comment A dropped comment.

=cut

sub code_outside_pod { 1 }

=pod

Back in POD with L</"A Section"> and L<perlvar>.
"""


def test_pod_paragraphs_keep_prose_and_replace_formatting_codes():
    assert pod_paragraphs(POD) == [
        "NAME",
        "perlfoo - the foo manual",
        "DESCRIPTION",
        'This is an ordinary paragraph with $a->{b} and print, see "open" in perlfunc and the site, '
        '<tag>, nested bold text, /etc/passwd, no break, caf\u00e9 and "I/O Operators" in perlop.',
        "A bullet item's text.",
        "open FILEHANDLE",
        "A term item.",
        'Back in POD with "A Section" and perlvar.',
    ]


def test_read_pod_tree_names_documents_and_honours_encoding(tmp_path):
    pod_dir = tmp_path / "usr/share/perl/5.36.0/pod"
    (pod_dir).mkdir(parents=True)
    (pod_dir / "perllatin.pod").write_bytes("=encoding latin1\n\n=head1 Caf\u00e9\n".encode("latin-1"))
    write(pod_dir / "perlfoo.pod", POD)
    write(pod_dir / "perltoc.pod", "=head1 Contents\n")
    write(tmp_path / "usr/share/man/man1/perlfoo.pod", "=head1 Held out\n")
    documents = list(read_pod_tree(tmp_path, "perl-doc", "usr/share", exclude=("perltoc.pod",)))
    assert [document.identity for document in documents] == [
        "perl-doc/perl/5.36.0/pod/perlfoo", "perl-doc/perl/5.36.0/pod/perllatin"]
    assert documents[1] == RawDocument("perl-doc/perl/5.36.0/pod/perllatin", ("Caf\u00e9",))


# --- GNU info --------------------------------------------------------------------------------------

INFO_PART_1 = """\
This is foo.info, produced by makeinfo version 6.8 from foo.texi.

\x1f
File: foo.info,  Node: Top,  Next: Usage,  Up: (dir)

Foo Manual
**********

This manual documents Foo, a program that does things.

* Menu:

* Usage::                 How to use it.
* Options: Option Table.  Its options.

Indices

* Index::
"""

INFO_PART_2 = """\
This is foo.info, produced by makeinfo version 6.8 from foo.texi.

\x1f
File: foo.info,  Node: Usage,  Next: Index,  Prev: Top,  Up: Top

1.2 Using Foo
=============

Run foo on a file, as in this example (*note Option Table::):

     $ foo --verbose file.txt
     done

   The second paragraph has a cross reference across lines, *Note The
Option Table: Option Table, for details, and *note emphasis: (bar)Top.
   • A bullet item that is
     continued here.
   • Another item.

‘--verbose’
     Print what foo does.

 -- Function: foo-run file
     Run foo on FILE and return its status.

          (foo-run "x") ⇒ 0

* Menu:

* Details::

The text after a menu in the middle of a node goes on
over two lines.

   ---------- Footnotes ----------

   (1) A footnote.

\x1f
File: foo.info,  Node: Index,  Prev: Usage,  Up: Top

Index
*****

* Menu:

* foo:                                   Usage.                 (line 6)
"""

INFO_MAIN = """\
This is foo.info, produced by makeinfo version 6.8 from foo.texi.

\x1f
Indirect:
foo.info-1: 70
foo.info-2: 400
\x1f
Tag Table:
(Indirect)
Node: Top\x7f70
Node: Usage\x7f400
\x1f
End Tag Table

\x1f
Local Variables:
coding: utf-8
End:
"""

USAGE_PARAGRAPHS = [
    "Using Foo",
    "Run foo on a file, as in this example (see Option Table):",
    "The second paragraph has a cross reference across lines, See The Option Table, for details, "
    "and emphasis.",
    "A bullet item that is continued here.",
    "Another item.",
    "‘--verbose’",
    "Print what foo does.",
    "Run foo on FILE and return its status.",
    "The text after a menu in the middle of a node goes on over two lines.",
    "(1) A footnote.",
]


def test_info_nodes_drop_menus_examples_and_definitions_and_keep_link_text():
    assert info_nodes(INFO_PART_1) == [
        ("Top", ["Foo Manual", "This manual documents Foo, a program that does things."]),
    ]
    assert info_nodes(INFO_PART_2) == [("Usage", USAGE_PARAGRAPHS), ("Index", ["Index"])]
    assert info_nodes(INFO_MAIN) == []


def test_read_info_files_reads_a_split_manual_through_its_indirect_table(tmp_path):
    info_dir = tmp_path / "usr/share/info"
    write(info_dir / "foo.info.gz", INFO_MAIN, compress=True)
    write(info_dir / "foo.info-1.gz", INFO_PART_1, compress=True)
    write(info_dir / "foo.info-2.gz", INFO_PART_2, compress=True)
    documents = list(read_info_files(tmp_path, "foo", "usr/share/info", include=("*.info*.gz",)))
    assert [document.identity for document in documents] == ["foo/foo/Top", "foo/foo/Usage", "foo/foo/Index"]
    assert documents[1].paragraphs == tuple(USAGE_PARAGRAPHS)


def test_read_info_files_rejects_a_missing_part_and_corrupt_gzip(tmp_path):
    info_dir = tmp_path / "usr/share/info"
    write(info_dir / "foo.info.gz", INFO_MAIN, compress=True)
    write(info_dir / "foo.info-1.gz", INFO_PART_1, compress=True)
    with pytest.raises(CorpusError, match=r"foo\.info\.gz: indirect part foo\.info-2 is missing"):
        list(read_info_files(tmp_path, "foo", "usr/share/info"))
    (info_dir / "foo.info-2.gz").write_bytes(b"\x1f\x8b\x08\x00 not gzip data")
    with pytest.raises(CorpusError, match=r"foo\.info-2\.gz: unreadable or corrupt"):
        list(read_info_files(tmp_path, "foo", "usr/share/info"))


# --- reStructuredText ------------------------------------------------------------------------------

RST = """\
.. SPDX-License-Identifier: GPL-2.0

=============
The Subsystem
=============

The subsystem does *many* things, described in
:doc:`the overview <overview>`::

    $ echo code

See ``foo()`` for more.
"""


def test_read_rst_tree_cleans_sphinx_sources(tmp_path):
    sources = tmp_path / "usr/share/doc/linux-doc/html/_sources"
    write(sources / "sub/index.rst.txt", RST)
    write(sources / "translations/it_IT/index.rst.txt", "Il sottosistema.\n")
    write(sources / "empty.rst.txt", ".. toctree::\n\n   sub/index\n")
    documents = list(read_rst_tree(tmp_path, "linux-doc", "usr/share/doc/linux-doc/html/_sources",
                                   include=("*.rst.txt",), exclude=("translations/*",)))
    assert documents == [RawDocument("linux-doc/sub/index", (
        "The Subsystem",
        "The subsystem does many things, described in the overview:",
        "See foo() for more.",
    ))]


# --- plain text and kernel ABI files -------------------------------------------------------------

NEWS = """\
GNU Foo NEWS -- history of user-visible changes.  -*- outline -*-

This file is about changes in Foo version 2.


* Changes in Foo 2.1

+++
** The command 'foo-bar' was renamed to 'foo-baz'.
This is to fix an embarrassing typo in the
original name.

** A long heading that wraps onto the next line of the file, since it
is longer than the fill column.

** Deliberate line breaks
keep short lines
apart.

To enable it, add this to your init file:

    (setq foo-baz t)
    (foo-mode 1)

The keys are:

\tC-f\tMove forward
\tC-b\tMove backward

  - a list item whose text is long enough to be wrapped by the fill command
    and goes on here
  - another item

* Changes in Foo 2.0

Nothing much.
\f
Local Variables:
mode: outline
End:
"""


def test_text_paragraphs_join_lines_and_drop_code_tables_and_markers():
    assert text_paragraphs(NEWS) == [
        "GNU Foo NEWS -- history of user-visible changes.",
        "This file is about changes in Foo version 2.",
        "Changes in Foo 2.1",
        "The command 'foo-bar' was renamed to 'foo-baz'.",
        "This is to fix an embarrassing typo in the original name.",
        "A long heading that wraps onto the next line of the file, since it is longer than the fill column.",
        "Deliberate line breaks",
        "keep short lines",
        "apart.",
        "To enable it, add this to your init file:",
        "The keys are:",
        "a list item whose text is long enough to be wrapped by the fill command and goes on here",
        "another item",
        "Changes in Foo 2.0",
        "Nothing much.",
    ]


def test_text_paragraphs_remove_org_markup_and_source_blocks():
    org = """\
#+TITLE: Org notes

Use ~foo~ and =bar= with [[https://x.org][the site]] or
[[https://y.org]].

#+begin_src emacs-lisp
(setq a b)
#+end_src
"""
    assert text_paragraphs(org) == ["Use foo and bar with the site or https://y.org."]


def test_read_text_files_splits_outline_files_into_sections_and_skips_links(tmp_path):
    etc = tmp_path / "usr/share/emacs/28.2/etc"
    write(etc / "NEWS", NEWS)
    tutorial = "Emacs tutorial.\n\nType C-v (View next screen) to move on to the next screenful of\ntext.\n"
    write(etc / "tutorials/TUTORIAL", tutorial)
    write(etc / "tutorials/TUTORIAL.de", "Einf\u00fchrung.\n")
    (etc / "COPYING").symlink_to("../../../common-licenses/GPL-3")
    documents = list(read_text_files(tmp_path, "emacs-etc", "usr/share/emacs/28.2/etc",
                                     include=("NEWS", "COPYING", "tutorials/TUTORIAL"),
                                     split_sections=True))
    assert [document.identity for document in documents] == [
        "emacs-etc/NEWS/0", "emacs-etc/NEWS/1", "emacs-etc/NEWS/2", "emacs-etc/tutorials/TUTORIAL"]
    assert documents[2].paragraphs == ("Changes in Foo 2.0", "Nothing much.")
    assert documents[3].paragraphs == (
        "Emacs tutorial.", "Type C-v (View next screen) to move on to the next screenful of text.")


ABI = """\
What:\t\t/sys/class/foo/bar
Date:\t\tJuly 2016
KernelVersion:\t4.8
Contact:\tfoo@vger.kernel.org
Description:
\t\tThis attribute shows the current state of the bar, as a number from
\t\tzero to three.

\t\tWriting 1 to it resets the bar.
Users:\t\tfoo-utils

What:\t\t/sys/class/foo/baz
Description:\tThe baz of the foo, on this line of the description and
\t\ton the next.
"""


def test_abi_paragraphs_read_the_description_fields(tmp_path):
    expected = [
        "This attribute shows the current state of the bar, as a number from zero to three.",
        "Writing 1 to it resets the bar.",
        "The baz of the foo, on this line of the description and on the next.",
    ]
    assert abi_paragraphs(ABI) == expected
    write(tmp_path / "Documentation/ABI/testing/sysfs-class-foo.gz", ABI, compress=True)
    write(tmp_path / "Documentation/ABI/README", "This directory attempts to document the ABI.\n")
    documents = list(read_abi_files(tmp_path, "linux-abi", "Documentation/ABI"))
    assert documents == [RawDocument("linux-abi/testing/sysfs-class-foo", tuple(expected))]


def test_a_missing_directory_is_an_error(tmp_path):
    with pytest.raises(CorpusError, match="usr/share/info: no such directory"):
        list(read_info_files(tmp_path, "foo", "usr/share/info"))
