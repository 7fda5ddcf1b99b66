"""Documents to chunks: parse Markdown, plain text and HTML into blocks, then cut them into chunks.

Owns the parsers (HTML text comes from the stdlib `html.parser`; Markdown front matter becomes document
metadata) and the chunker. Does not read files, hash them or store anything (`bases.py` and
`stores/knowledge.py` do). Pure functions: the same text always gives the same chunks, which is what
lets an ingest skip a file whose bytes and `CHUNKER_VERSION` are unchanged.

Invariants of `chunk_document`:
- A chunk never spans two sections: every heading starts a new one, and the heading path (the titles of
  the enclosing headings) is the chunk's `heading` and its `heading_path` metadata.
- Chunks are made of whole blocks (paragraphs, lists, fenced code) up to `TARGET_CHARS`; a block longer
  than `MAX_CHARS` is split at sentence ends (then at spaces) into pieces of about `TARGET_CHARS`, so no
  chunk's text exceeds `MAX_CHARS` plus the overlap.
- A section's next chunk starts with the end of the previous one: whole trailing blocks within
  `OVERLAP_CHARS`, else the last sentences (or words) within it.
- Each chunk records the source lines it came from (`start_line`, `end_line`, 1-based, inclusive).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Literal

from mcphost.protocol import JSONObject
from mcphost.stores.knowledge import ChunkDraft

CHUNKER_VERSION = "v2"
"""Bump when chunking changes: every document is re-chunked at its next ingest."""
TARGET_CHARS = 1200
MAX_CHARS = 1800
OVERLAP_CHARS = 200


@dataclass(frozen=True)
class Block:
    """A heading, paragraph, list or code block with the lines it came from (1-based, inclusive)."""

    kind: Literal["heading", "text", "code"]
    text: str
    start_line: int
    end_line: int
    level: int = 0


@dataclass
class ParsedDocument:
    title: str
    blocks: list[Block]
    metadata: JSONObject = field(default_factory=JSONObject)


_ATX = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")


def _front_matter(lines: list[str]) -> tuple[JSONObject, int]:
    """`key: value` lines between `---` fences at the top; (metadata, lines consumed)."""
    if not lines or lines[0].strip() != "---":
        return {}, 0
    for end in range(1, min(len(lines), 200)):
        if lines[end].strip() in ("---", "..."):
            break
    else:
        return {}, 0
    meta: JSONObject = {}
    for line in lines[1:end]:
        key, sep, raw = line.partition(":")
        key = key.strip()
        if not sep or not key or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", key):
            continue
        meta[key] = _scalar_or_list(raw.strip())
    return meta, end + 1


def _scalar_or_list(raw: str) -> str | int | float | bool | list[str]:
    if raw.startswith("[") and raw.endswith("]"):
        return [part.strip().strip("\"'") for part in raw[1:-1].split(",") if part.strip()]
    unquoted = raw.strip("\"'")
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    if re.fullmatch(r"-?\d{1,15}", raw):
        return int(raw)
    return unquoted


def parse_markdown(text: str, fallback_title: str) -> ParsedDocument:
    """Headings (ATX and setext), paragraphs and lists, fenced code kept whole; front matter as metadata."""
    lines = text.splitlines()
    metadata, first = _front_matter(lines)
    blocks: list[Block] = []
    para: list[str] = []
    para_start = 0
    i = first
    while i < len(lines):
        line, number = lines[i], i + 1
        fence = _FENCE.match(line)
        heading = _ATX.match(line)
        if (fence or heading or not line.strip()) and para:
            blocks.append(Block("text", "\n".join(para), para_start, number - 1))
            para = []
        if fence:
            marker = fence.group(1)
            end = i + 1
            while end < len(lines) and not lines[end].lstrip().startswith(marker):
                end += 1
            body = "\n".join(lines[i : end + 1])
            blocks.append(Block("code", body, number, min(end + 1, len(lines))))
            i = end + 1
            continue
        if heading:
            blocks.append(Block("heading", _plain(heading.group(2)), number, number, len(heading.group(1))))
        elif line.strip():
            if para and len(para) == 1 and _SETEXT.match(line):
                level = 1 if line.strip().startswith("=") else 2
                blocks.append(Block("heading", _plain(para[0]), para_start, number, level))
                para = []
            else:
                if not para:
                    para_start = number
                para.append(line)
        i += 1
    if para:
        blocks.append(Block("text", "\n".join(para), para_start, len(lines)))
    title = metadata.get("title")
    if not isinstance(title, str) or not title:
        title = next((b.text for b in blocks if b.kind == "heading" and b.level == 1), fallback_title)
    return ParsedDocument(title=title, blocks=blocks, metadata=metadata)


def _plain(heading: str) -> str:
    """Heading text without code and emphasis marks; what is inside `code` stays as written."""
    parts = heading.split("`")
    for i in range(0, len(parts), 2):  # outside code spans
        parts[i] = re.sub(r"(?<!\w)(\*{1,2}|_{1,2})(\S(?:.*?\S)?)\1(?!\w)", r"\2", parts[i])
    return "".join(parts).strip()


def parse_text(text: str, fallback_title: str) -> ParsedDocument:
    """Paragraphs separated by blank lines; no headings."""
    blocks: list[Block] = []
    para: list[str] = []
    start = 0
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            if not para:
                start = number
            para.append(line)
        elif para:
            blocks.append(Block("text", "\n".join(para), start, number - 1))
            para = []
    if para:
        blocks.append(Block("text", "\n".join(para), start, start + len(para) - 1))
    return ParsedDocument(title=fallback_title, blocks=blocks)


class _HtmlText(HTMLParser):
    """Text of an HTML page as blocks: headings, paragraphs and preformatted text, with source lines."""

    BLOCK_TAGS = frozenset(
        [
            "p",
            "div",
            "li",
            "ul",
            "ol",
            "dl",
            "dt",
            "dd",
            "table",
            "tr",
            "td",
            "th",
            "section",
            "article",
            "main",
            "header",
            "footer",
            "aside",
            "blockquote",
            "figure",
            "figcaption",
            "form",
            "hr",
            "br",
            "body",
            "nav",
            "details",
            "summary",
        ]
    )
    SKIP_TAGS = frozenset(["script", "style", "noscript", "template", "svg", "head"])

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[Block] = []
        self.title = ""
        self._text: list[str] = []
        self._start = 0
        self._skip = 0
        self._in_title = False
        self._heading = 0
        self._pre = 0

    def _flush(self) -> None:
        raw = "".join(self._text)
        text = raw.strip("\n") if self._pre else " ".join(raw.split())
        if text.strip():
            end = self.getpos()[0]
            if self._heading:
                self.blocks.append(Block("heading", text, self._start, end, self._heading))
            else:
                self.blocks.append(Block("code" if self._pre else "text", text, self._start, end))
        self._text = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        if tag in self.SKIP_TAGS:
            self._skip += 1
            return
        if re.fullmatch(r"h[1-6]", tag) or tag == "pre" or tag in self.BLOCK_TAGS:
            self._flush()
            self._start = self.getpos()[0]
        if re.fullmatch(r"h[1-6]", tag):
            self._heading = int(tag[1])
        elif tag == "pre":
            self._pre += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        if tag in self.SKIP_TAGS:
            self._skip = max(0, self._skip - 1)
            return
        if re.fullmatch(r"h[1-6]", tag) or tag == "pre" or tag in self.BLOCK_TAGS:
            self._flush()
            self._start = self.getpos()[0]
            if re.fullmatch(r"h[1-6]", tag):
                self._heading = 0
            elif tag == "pre":
                self._pre = max(0, self._pre - 1)

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        if self._skip:
            return
        if not self._text:
            self._start = self.getpos()[0]
        self._text.append(data)

    def close(self) -> None:
        super().close()
        self._flush()


def parse_html(text: str, fallback_title: str) -> ParsedDocument:
    """Visible text of an HTML page (scripts, styles and `<head>` left out)."""
    parser = _HtmlText()
    parser.feed(text)
    parser.close()
    title = " ".join(parser.title.split())
    if not title:
        title = next((b.text for b in parser.blocks if b.kind == "heading" and b.level == 1), fallback_title)
    return ParsedDocument(title=title, blocks=parser.blocks)


PARSERS: Mapping[str, Callable[[str, str], ParsedDocument]] = {
    "markdown": parse_markdown,
    "text": parse_text,
    "html": parse_html,
}


# -- chunking --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Piece:
    text: str
    start_line: int
    end_line: int


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _split_long(block: Block, limit: int, size: int) -> list[_Piece]:
    """A block longer than `limit` as pieces of about `size`: sentences packed together, words when a
    sentence is longer. Each piece keeps the block's line span (finer locations would need a position
    map)."""
    if len(block.text) <= limit:
        return [_Piece(block.text, block.start_line, block.end_line)]
    limit = size
    units: list[str] = []
    for sentence in _SENTENCE_END.split(block.text):
        while len(sentence) > limit:
            cut = sentence.rfind(" ", 0, limit)
            cut = cut if cut > limit // 2 else limit
            units.append(sentence[:cut])
            sentence = sentence[cut:].lstrip()
        if sentence:
            units.append(sentence)
    pieces: list[str] = []
    for unit in units:
        if pieces and len(pieces[-1]) + 1 + len(unit) <= limit:
            pieces[-1] = f"{pieces[-1]} {unit}"
        else:
            pieces.append(unit)
    return [_Piece(p, block.start_line, block.end_line) for p in pieces]


def _overlap(pieces: list[_Piece], budget: int) -> list[_Piece]:
    """The end of a chunk to repeat at the start of the next one: whole trailing pieces within `budget`,
    else the last piece's final sentences (or words) within it."""
    kept: list[_Piece] = []
    used = 0
    for piece in reversed(pieces):
        if used + len(piece.text) > budget:
            break
        kept.insert(0, piece)
        used += len(piece.text) + 2
    if kept:
        return kept
    last = pieces[-1]
    tail = last.text[-budget:]
    sentence = tail.find(". ")
    # Start at a sentence when that keeps at least half the budget, else at the first whole word.
    start = sentence + 2 if sentence >= 0 and len(tail) - sentence - 2 >= budget // 2 else tail.find(" ") + 1
    tail = tail[start:].strip()
    return [_Piece(tail, last.end_line, last.end_line)] if tail else []


def chunk_document(
    doc: ParsedDocument, *, target: int = TARGET_CHARS, limit: int = MAX_CHARS, overlap: int = OVERLAP_CHARS
) -> list[ChunkDraft]:
    """Section-bound chunks of whole blocks with overlap; see the module's invariants."""
    chunks: list[ChunkDraft] = []
    path: list[tuple[int, str]] = []

    def emit(pieces: list[_Piece], headings: list[str]) -> None:
        names = headings if headings and headings[0] == doc.title else [doc.title, *headings]
        chunks.append(
            ChunkDraft(
                heading=" > ".join(names),
                text="\n\n".join(p.text for p in pieces),
                metadata={
                    "heading_path": headings,
                    "start_line": pieces[0].start_line,
                    "end_line": max(p.end_line for p in pieces),
                },
            )
        )

    def flush(section: list[Block]) -> None:
        headings = [name for _, name in path]
        current: list[_Piece] = []
        fresh = 0
        size = 0
        for block in section:
            for piece in _split_long(block, limit, target):
                if fresh and size + len(piece.text) > target:
                    emit(current, headings)
                    current = _overlap(current, overlap)
                    size = sum(len(p.text) + 2 for p in current)
                    fresh = 0
                current.append(piece)
                size += len(piece.text) + 2
                fresh += 1
        if fresh:
            emit(current, headings)

    section: list[Block] = []
    for block in doc.blocks:
        if block.kind == "heading":
            flush(section)
            section = []
            while path and path[-1][0] >= block.level:
                path.pop()
            path.append((block.level, block.text))
        else:
            section.append(block)
    flush(section)
    return chunks
