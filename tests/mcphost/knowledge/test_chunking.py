"""Parsing Markdown, plain text and HTML into blocks, and cutting them into section-bound chunks."""

from __future__ import annotations

import itertools

from mcphost.knowledge.chunking import (
    MAX_CHARS,
    OVERLAP_CHARS,
    TARGET_CHARS,
    chunk_document,
    parse_html,
    parse_markdown,
    parse_text,
)

MARKDOWN = """---
title: The Gadget Guide
tags: [setup, intro]
draft: false
version: 3
---
# Gadget

Intro paragraph.

## Install

Run the installer.
- step one
- step two

```sh
# not a heading
make install
```

Setext heading
--------------

Under setext.

### Deep

Deep text.

## Use

Use it.
"""


def test_markdown_blocks_headings_front_matter_and_code() -> None:
    doc = parse_markdown(MARKDOWN, "fallback")
    assert doc.title == "The Gadget Guide"
    assert doc.metadata == {
        "title": "The Gadget Guide",
        "tags": ["setup", "intro"],
        "draft": False,
        "version": 3,
    }
    kinds = [(b.kind, b.level, b.text.splitlines()[0]) for b in doc.blocks]
    assert kinds == [
        ("heading", 1, "Gadget"),
        ("text", 0, "Intro paragraph."),
        ("heading", 2, "Install"),
        ("text", 0, "Run the installer."),
        ("code", 0, "```sh"),
        ("heading", 2, "Setext heading"),
        ("text", 0, "Under setext."),
        ("heading", 3, "Deep"),
        ("text", 0, "Deep text."),
        ("heading", 2, "Use"),
        ("text", 0, "Use it."),
    ]
    code = doc.blocks[4]
    assert "# not a heading" in code.text
    assert (code.start_line, code.end_line) == (17, 20)
    assert (doc.blocks[3].start_line, doc.blocks[3].end_line) == (13, 15)


def test_chunks_follow_sections_with_heading_paths_and_lines() -> None:
    chunks = chunk_document(parse_markdown(MARKDOWN, "fallback"))
    summary = [(c.heading, c.metadata["heading_path"], c.text.splitlines()[0]) for c in chunks]
    assert summary == [
        ("The Gadget Guide > Gadget", ["Gadget"], "Intro paragraph."),
        ("The Gadget Guide > Gadget > Install", ["Gadget", "Install"], "Run the installer."),
        ("The Gadget Guide > Gadget > Setext heading", ["Gadget", "Setext heading"], "Under setext."),
        (
            "The Gadget Guide > Gadget > Setext heading > Deep",
            ["Gadget", "Setext heading", "Deep"],
            "Deep text.",
        ),
        ("The Gadget Guide > Gadget > Use", ["Gadget", "Use"], "Use it."),
    ]
    install = chunks[1]
    assert "make install" in install.text
    assert (install.metadata["start_line"], install.metadata["end_line"]) == (13, 20)


def test_the_title_heads_the_path_once() -> None:
    chunks = chunk_document(parse_markdown("# Title\n\ntext\n", "file"))
    assert [c.heading for c in chunks] == ["Title"]
    untitled = chunk_document(parse_markdown("text only\n", "notes"))
    assert [(c.heading, c.metadata["heading_path"]) for c in untitled] == [("notes", [])]


def _paragraphs(n: int, words: int = 40) -> str:
    return "\n\n".join(
        " ".join(f"p{i}w{j}" for j in range(words)) + f". End of paragraph {i}." for i in range(n)
    )


def test_a_long_section_becomes_several_chunks_that_overlap() -> None:
    text = "# Long\n\n" + _paragraphs(30) + "\n\n# Next\n\nshort"
    chunks = chunk_document(parse_markdown(text, "f"))
    long = [c for c in chunks if c.metadata["heading_path"] == ["Long"]]
    assert len(long) >= 4
    for chunk in long:
        assert len(chunk.text) <= TARGET_CHARS + OVERLAP_CHARS
    for before, after in itertools.pairwise(long):
        last_paragraph = before.text.split("\n\n")[-1]
        assert after.text.startswith(last_paragraph) or last_paragraph[-60:] in after.text
    every = " ".join(c.text for c in long)
    assert all(f"End of paragraph {i}." in every for i in range(30))
    assert chunks[-1].text == "short"
    assert chunks[-1].metadata["heading_path"] == ["Next"]


def test_a_huge_paragraph_is_split_at_sentences_then_words() -> None:
    sentence = " ".join(["word"] * 30) + "."
    paragraph = " ".join([sentence] * 100) + " " + "x" * 5000
    chunks = chunk_document(parse_text(paragraph, "big"))
    assert len(chunks) > 5
    assert all(len(c.text) <= MAX_CHARS + OVERLAP_CHARS for c in chunks)
    assert sum(c.text.count("word") for c in chunks) >= 3000


def test_plain_text_paragraphs_keep_their_lines() -> None:
    doc = parse_text("first line\nsecond line\n\n\nthird\n", "notes")
    assert [(b.text, b.start_line, b.end_line) for b in doc.blocks] == [
        ("first line\nsecond line", 1, 2),
        ("third", 5, 5),
    ]
    assert doc.title == "notes"


HTML = """<!doctype html>
<html><head><title>Widget &amp; Co</title><style>p { color: red }</style>
<script>var hidden = "secret";</script></head>
<body>
<nav>Home</nav>
<h1>Widgets</h1>
<p>Widgets are <b>small</b>
   and useful &lt;really&gt;.</p>
<h2>Sizes</h2>
<ul><li>Small</li><li>Large</li></ul>
<pre>
  keep   spacing
</pre>
</body></html>
"""


def test_html_text_is_extracted_with_headings_and_lines() -> None:
    doc = parse_html(HTML, "page")
    assert doc.title == "Widget & Co"
    texts = [(b.kind, b.text) for b in doc.blocks]
    assert ("heading", "Widgets") in texts
    assert ("text", "Widgets are small and useful <really>.") in texts
    assert ("text", "Small") in texts
    assert ("code", "  keep   spacing") in texts
    assert all("secret" not in t and "color" not in t for _, t in texts)
    para = next(b for b in doc.blocks if b.text.startswith("Widgets are"))
    assert (para.start_line, para.end_line) == (7, 8)
    chunks = chunk_document(doc)
    assert chunks[-1].metadata["heading_path"] == ["Widgets", "Sizes"]
    assert chunks[-1].heading == "Widget & Co > Widgets > Sizes"


def test_chunking_is_deterministic() -> None:
    doc = parse_markdown(MARKDOWN + _paragraphs(10), "f")
    assert chunk_document(doc) == chunk_document(parse_markdown(MARKDOWN + _paragraphs(10), "f"))


def test_headings_lose_emphasis_but_keep_code() -> None:
    doc = parse_markdown("# The `run_id` of **every** _run_\n\ntext\n", "f")
    assert doc.title == "The run_id of every run"
