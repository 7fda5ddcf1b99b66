"""Full-text queries shared by the knowledge and transcript stores: words, scope filters, snippets.

Owns how a free-text query becomes search terms, the FTS5 MATCH expression and the PostgreSQL tsquery
built from them, the SQLite scope tokens that confine a search to one knowledge base or one conversation
thread, and the snippet shown around a hit. Does not own the indexes (migrations 0002 and 0004) or
ranking (`bm25()` on SQLite, `ts_rank_cd()` on PostgreSQL, in the stores).

Invariants:
- A query is a bag of words: `\\w+` runs, lower-cased, de-duplicated, English stop words dropped unless
  nothing else is left, at most `MAX_TERMS`. Words are matched with OR and ranked by relevance; nothing
  of the query's text reaches SQL except as a bound parameter or a double-quoted FTS5 string made only
  of word characters, so no query can inject operators or column filters (a word spelling another
  scope's token is only a word).
- The scope is never text of the searched document. On SQLite each FTS5 row holds its scope token in a
  column of its own (`scope`) and the expression matches it only through a column filter
  (`{scope} : "<token>"`), so a document that contains another scope's token in its text matches nothing
  more; the stores also check the scope's columns on the joined row. On PostgreSQL there is no token: the
  scope is a WHERE on the row's own columns (`kb_id`; `conversation_id`, `thread_id`), which lead the
  multi-column GIN index (btree_gin) in front of the words' tsvector.
- SQLite scope tokens here must equal the ones the migrations index: `k` + hex(kb_id) and
  `s` + hex(conversation_id) + `x` + hex(thread_id) (0004; `x` is not a hex digit, so the token is
  injective, and FTS5 folds case).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from sqlalchemy import ColumnElement, Text, cast, func, literal, literal_column

from mcphost.errors import InvalidArgumentError

MAX_TERMS = 20
TS_CONFIG = "english"
_WORD = re.compile(r"\w+")

STOP_WORDS: frozenset[str] = frozenset(
    {
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
    }
)


def query_terms(query: str) -> list[str]:
    """The search terms of a free-text query.

    Raises:
        InvalidArgumentError: the query holds no word at all.
    """
    words: list[str] = []
    for match in _WORD.finditer(query.lower()):
        word = match.group()
        if word not in words:
            words.append(word)
    if not words:
        raise InvalidArgumentError(
            f"The query {query[:80]!r} has no words to search for; pass a few words.",
            details={"field": "query"},
        )
    content = [w for w in words if w not in STOP_WORDS]
    return (content or words)[:MAX_TERMS]


def kb_scope_sqlite(kb_id: str) -> str:
    return "k" + kb_id.encode().hex()


def thread_scope_sqlite(conversation_id: str, thread_id: str | None) -> str:
    return "s" + conversation_id.encode().hex() + "x" + (thread_id or "").encode().hex()


def _in_scope_column(scope: str) -> str:
    return '{scope} : "' + scope + '"'


def fts5_match(
    scope: str | None,
    terms: Sequence[str],
    *,
    all_terms: bool = False,
    scored: Sequence[str] = (),
) -> str:
    """`{scope} : "<token>" AND ("t1" OR "t2" …)`: the scope token, in the scope column only, ANDed with
    any (or, with `all_terms`, every) one of `terms`; without a scope, just the words. Words in `scored`
    count in the rank (`bm25()` ranks every phrase of the expression) without widening the match: they
    sit in a branch the scope phrase always satisfies.

    Only the scope phrase has a column filter. It is what confines the match: a token written into
    searched text is in another column and matches nothing. Its doclist holds one position per row, so
    the filter costs little; the words have none (with `detail=full` FTS5 checks a filter position by
    position, which made a probe ten times slower when the words carried one), and a word that happens
    to equal the row's own token only meets the scope column, whose rank weight is 0."""
    words = [*terms, *scored]
    assert terms, terms
    assert all(_WORD.fullmatch(t) for t in words), words
    expression = "(" + (" AND " if all_terms else " OR ").join(f'"{t}"' for t in terms) + ")"
    if scope is None:
        return expression
    assert _WORD.fullmatch(scope), scope
    expression = f"{_in_scope_column(scope)} AND {expression}"
    if scored:
        expression += f" AND ({_in_scope_column(scope)} OR " + " OR ".join(f'"{t}"' for t in scored) + ")"
    return expression


def pg_words_query(terms: Sequence[str], *, all_terms: bool = False) -> ColumnElement[str]:
    """`plainto_tsquery(t1) || plainto_tsquery(t2) …` (`&&` with `all_terms`): any (every) one of the
    words, each a bound parameter."""
    from sqlalchemy.dialects.postgresql import TSQUERY  # PostgreSQL's dialect loads on PostgreSQL only

    config: ColumnElement[object] = literal_column(f"'{TS_CONFIG}'::regconfig")
    parts = [func.plainto_tsquery(config, cast(literal(t), Text), type_=TSQUERY) for t in terms]
    query: ColumnElement[str] = parts[0]
    for part in parts[1:]:
        query = query.op("&&" if all_terms else "||", return_type=TSQUERY)(part)
    return query


def pg_matches(vector: ColumnElement[str], words: ColumnElement[str]) -> ColumnElement[bool]:
    """`vector @@ words`; the caller ANDs it with the scope's column equalities."""
    return vector.op("@@", is_comparison=True)(words)


def _stem(term: str) -> str:
    """A crude prefix that the indexed (stemmed) forms of `term` share, for highlighting only."""
    for suffix in ("ing", "ies", "ed", "es", "ly", "s"):
        if term.endswith(suffix) and len(term) - len(suffix) >= 3:
            return term[: -len(suffix)]
    return term


def snippet(text: str, terms: Sequence[str], width: int = 240) -> str:
    """About `width` characters of `text` around its first matching word, matches marked **like this**."""
    stems = [_stem(t) for t in terms]
    spans = [m.span() for m in _WORD.finditer(text) if any(m.group().lower().startswith(s) for s in stems)]
    if not spans:
        start = 0
    else:
        start = max(0, spans[0][0] - width // 3)
        while start > 0 and not text[start - 1].isspace():
            start -= 1
    stop = min(len(text), start + width)
    while stop < len(text) and not text[stop].isspace() and stop - start < width + 30:
        stop += 1
    out: list[str] = ["…" if start > 0 else ""]
    cursor = start
    for begin, end in spans:
        if begin < start or end > stop:
            continue
        out.append(text[cursor:begin])
        out.append(f"**{text[begin:end]}**")
        cursor = end
    out.append(text[cursor:stop])
    out.append("…" if stop < len(text) else "")
    return " ".join("".join(out).split())
