"""The HTML documentation reader: paragraphs of javadoc-, Sphinx- and vim-help-like pages, and
the documents of a tree (globs, order, gzip, languages, errors)."""
import gzip
import os

import pytest

from fairseq_ext.corpus.english.html_docs import html_paragraphs, read_html_tree
from fairseq_ext.corpus.english.raw import RawDocument
from fairseq_ext.corpus.errors import CorpusError

JAVADOC_PAGE = """<!DOCTYPE HTML>
<html lang="en">
<head>
<title>ArrayList (Java SE 17 &amp; JDK 17)</title>
<script type="text/javascript">var x = "<p>not text</p>";</script>
</head>
<body class="class-declaration-page">
<header role="banner" class="flex-header">
<nav role="navigation">
<div class="top-nav" id="navbar-top">
<ul id="navbar-top-firstrow" class="nav-list" title="Navigation">
<li><a href="../index.html">Overview</a></li>
<li><a href="prev.html">Prev Class</a></li>
<li><a href="next.html">Next Class</a></li>
</ul>
</div>
</nav>
</header>
<main role="main">
<div class="header">
<h1 title="Class ArrayList" class="title">Class ArrayList&lt;E&gt;</h1>
</div>
<div class="inheritance"><a href="../lang/Object.html">java.lang.Object</a></div>
<section class="class-description" id="class-description">
<div class="block">Resizable-array implementation of the <code>List</code>
 interface.  Implements all optional list operations.

 <p>The <code>size</code> and <code>get</code> operations run in
 <i>constant</i> time.  An application can grow it:<pre>
   List list = new ArrayList(...);</pre>

 <p>This class is a member of the
 <a href="package-summary.html#CollectionsFramework">
 Java Collections Framework</a>.</div>
</section>
<section class="summary">
<h2>Method Summary</h2>
<div class="col-last"><div class="block">Returns the number of elements.</div></div>
</section>
<section class="details">
<h2>Method Details</h2>
<div class="member-signature"><span>public</span>&nbsp;int&nbsp;size()</div>
<div class="block">Returns the number of elements in this list.</div>
<dl class="notes">
<dt>Returns:</dt>
<dd>the number of elements in this list</dd>
</dl>
</section>
</main>
<footer role="contentinfo"><p class="legal-copy">Copyright &copy; 1993, 2023, Oracle.</p></footer>
</body>
</html>
"""

SPHINX_PAGE = """<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8" /><title>Making queries &#8212; Django documentation</title>
<style>p { color: red; }</style></head>
<body>
<div class="related" role="navigation"><ul><li><a href="genindex.html">index</a></li>
<li class="right"><a href="next.html">next</a> |</li></ul></div>
<div class="document"><div class="body" role="main">
<section id="making-queries">
<h1>Making queries<a class="headerlink" href="#making-queries" title="Permalink">&para;</a></h1>
<p>Once you&#8217;ve created your <a class="reference internal" href="models.html">data
models</a>, Django automatically gives you a database-abstraction API &mdash; see
<code class="docutils literal notranslate"><span class="pre">QuerySet</span></code>.</p>
<div class="highlight-python notranslate"><div class="highlight"><pre><span></span><span class="n">Blog</span>
</pre></div></div>
<ul class="simple">
<li><p>Creating objects&nbsp;&amp; saving them.</p></li>
<li>Retrieving objects
<ul><li>with filters</li></ul></li>
</ul>
<table class="docutils">
<tr><th>Name</th><th>Meaning</th></tr>
<tr><td>exact</td><td>An exact match is required for the lookup.</td></tr>
</table>
<div class="admonition note"><p class="admonition-title">Note</p>
<p>Unclosed paragraphs end at the next block<p>like this one.<br>A line break is a space.</div>
</section>
</div></div>
<div class="sphinxsidebar" role="navigation"><h3>Table of Contents</h3>
<div><ul><li>Making queries</li></ul></div></div>
<div class="footer">&copy; Django Software Foundation and individual contributors.</div>
</body>
</html>
"""

VIM_PAGE = """<HTML>
<HEAD>
<META HTTP-EQUIV="Content-type" content="text/html; charset=ISO-8859-1">
<TITLE>Vim documentation: usr_05</TITLE>
</HEAD>
<BODY BGCOLOR="#ffffff">
<H1>Vim documentation: usr_05</H1>
<A HREF="index.html">main help file</A>
<HR>
<PRE>
*<A NAME="usr_05.txt"></A><B>usr_05.txt</B>*\tFor Vim version 9.0.

|<A HREF="#05.1">05.1</A>|\tThe <A HREF="starting.html#vimrc">vimrc</A> file
|<A HREF="#05.2">05.2</A>|\tSimple mappings

==============================================================================
*<A NAME="05.1"></A><B>05.1</B>*\tThe vimrc file

You probably got tired of typing commands that you use very often.  To start
Vim with your settings, see |<A HREF="starting.html#vimrc">vimrc</A>|:
<B>\t:edit $MYVIMRC</B>
This is the &quot;user <A HREF="starting.html#vimrc">vimrc</A> file&quot;.

:setl[ocal] {option}&lt;\tSet the local value of {option} to
\t\t\tits global value.
</PRE>
</BODY>
</HTML>
"""


def test_javadoc_page_keeps_the_comments_and_drops_navigation_summaries_and_code():
    assert html_paragraphs(JAVADOC_PAGE) == [
        "Resizable-array implementation of the List interface. Implements all optional list "
        "operations.",
        "The size and get operations run in constant time. An application can grow it:",
        "This class is a member of the Java Collections Framework.",
        "Method Details",
        "Returns the number of elements in this list.",
        "Returns:",
        "the number of elements in this list",
    ]


def test_sphinx_page_keeps_prose_lists_and_sentence_cells_only():
    assert html_paragraphs(SPHINX_PAGE) == [
        "Making queries",
        "Once you\u2019ve created your data models, Django automatically gives you a "
        "database-abstraction API \u2014 see QuerySet.",
        "Creating objects & saving them.",
        "Retrieving objects",
        "with filters",
        "An exact match is required for the lookup.",
        "Note",
        "Unclosed paragraphs end at the next block",
        "like this one. A line break is a space.",
    ]


def test_vim_help_keeps_the_preformatted_text_without_examples_tags_and_bars():
    assert html_paragraphs(VIM_PAGE, vim_help=True) == [
        "Vim documentation: usr_05",
        "main help file",
        "For Vim version 9.0.",
        "05.1 The vimrc file",
        "05.2 Simple mappings",
        "The vimrc file",
        "You probably got tired of typing commands that you use very often. To start Vim with "
        "your settings, see vimrc:",
        'This is the "user vimrc file".',
        "Set the local value of {option} to its global value.",
    ]
    # Without vim_help the <pre> is code like any other.
    assert html_paragraphs(VIM_PAGE) == ["Vim documentation: usr_05", "main help file"]


def _write(path, text: str, compress: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8")
    path.write_bytes(gzip.compress(data) if compress else data)


def _page(body: str, lang: str = "en") -> str:
    return f'<html lang="{lang}"><head><title>t</title></head><body><p>{body}</p></body></html>'


def test_tree_reads_matching_files_in_path_order_with_gzip_and_skips_the_rest(tmp_path):
    docs = tmp_path / "usr/share/doc/pkg/html"
    _write(docs / "b.html", _page("Second page."))
    _write(docs / "a/z.html.gz", _page("A compressed page."), compress=True)
    _write(docs / "a/index.html", _page("Contents."))
    _write(docs / "_modules/x.html", _page("Source code."))
    _write(docs / "a/deep/c.html", _page("Deep page."))
    _write(docs / "fr.html", _page("Une page traduite.", lang="pt-br"))
    _write(docs / "empty.html", "<html><body><pre>only code</pre></body></html>")
    _write(docs / "notes.txt", "not HTML")
    os.symlink("b.html", docs / "link.html")
    documents = list(read_html_tree(tmp_path, "pkg-doc", "usr/share/doc/pkg/html",
                                    include=("*.html", "*.html.gz"),
                                    exclude=("index.html", "_modules/**")))
    assert documents == [
        RawDocument("pkg-doc/a/deep/c", ("Deep page.",)),
        RawDocument("pkg-doc/a/z", ("A compressed page.",)),
        RawDocument("pkg-doc/b", ("Second page.",)),
    ]
    anchored = list(read_html_tree(tmp_path, "pkg-doc", "usr/share/doc/pkg/html",
                                   include=("a/*.html", "a/**/*.html.gz")))
    assert [document.identity for document in anchored] == ["pkg-doc/a/index", "pkg-doc/a/z"]


def test_pages_are_decoded_as_utf8_first_then_in_their_declared_charset(tmp_path):
    docs = tmp_path / "html"
    docs.mkdir()
    meta = '<meta http-equiv="Content-Type" content="text/html; charset=ISO-8859-1">'
    (docs / "latin1.html").write_bytes(f"<html><head>{meta}</head><body><p>Pell\xe9 wrote it."
                                       "</p></body></html>".encode("latin-1"))
    (docs / "utf8.html").write_bytes(f"<html><head>{meta}</head><body><p>Pell\xe9 fixed it."
                                     "</p></body></html>".encode("utf-8"))
    documents = list(read_html_tree(tmp_path, "v", "html"))
    assert [document.paragraphs for document in documents] == [("Pell\xe9 wrote it.",),
                                                               ("Pell\xe9 fixed it.",)]


def test_bad_input_raises_a_corpus_error_naming_the_file(tmp_path):
    docs = tmp_path / "html"
    _write(docs / "broken.html.gz", "<p>text</p>")  # not gzip data
    with pytest.raises(CorpusError, match="broken.html.gz"):
        list(read_html_tree(tmp_path, "x", "html", include=("*.html.gz",)))
    with pytest.raises(CorpusError, match="missing"):
        list(read_html_tree(tmp_path, "x", "missing"))
