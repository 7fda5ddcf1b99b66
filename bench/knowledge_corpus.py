"""The retrieval corpus: mcphost's own documentation as a knowledge base, and how it was made.

`examples/knowledge/mcphost/` is a snapshot of this project's design documents (one file per `##`
section) and module docstrings (one file per module), with front matter naming the source. It is the
example knowledge base of `examples/knowledge-and-tools.toml` and the corpus `bench/knowledge_quality.py`
measures retrieval on. The snapshot is committed so the labelled queries stay valid while the code moves;
regenerate it (and re-check the labels) with

    uv run python -m bench.knowledge_corpus [--docs DESIGN.md PROTOCOL.md ...] [--out DIR]

Only text written in this repository goes in: nothing is downloaded.
"""

from __future__ import annotations

import argparse
import ast
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "examples" / "knowledge" / "mcphost"
MIN_DOCSTRING_CHARS = 300
PACKAGES = ("mcphost", "mcphost_runners", "mcphost_bridge")


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60] or "section"


def markdown_sections(path: Path) -> list[tuple[str, str]]:
    """(section title, text) for every `## ` section of a Markdown file; the text before the first one
    becomes an "Overview" section."""
    title = path.stem
    sections: list[tuple[str, list[str]]] = [("Overview", [])]
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and line.startswith("# ") and title == path.stem:
            title = line[2:].strip()
            continue
        if not fenced and line.startswith("## "):
            sections.append((line[3:].strip(), []))
            continue
        sections[-1][1].append(line)
    return [(name, "\n".join(body).strip()) for name, body in sections if "\n".join(body).strip()]


def module_docstrings() -> list[tuple[str, str]]:
    """(dotted module name, docstring) of every module with a substantial docstring."""
    found: list[tuple[str, str]] = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
            if doc and len(doc) >= MIN_DOCSTRING_CHARS:
                module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
                found.append((module.removesuffix(".__init__"), doc))
    return found


def _front(**fields: str) -> str:
    return "---\n" + "".join(f"{k}: {v}\n" for k, v in fields.items()) + "---\n"


def build(docs: Sequence[Path], out: Path) -> int:
    """Write the corpus into `out` (replacing it); how many documents."""
    if out.exists():
        shutil.rmtree(out)
    count = 0
    for doc in docs:
        kind = doc.stem.lower()
        folder = out / kind
        folder.mkdir(parents=True, exist_ok=True)
        for index, (section, text) in enumerate(markdown_sections(doc)):
            name = f"{index:02d}-{slug(section)}.md"
            body = (
                _front(title=f"{doc.stem}: {section}", kind=kind, source=doc.name)
                + f"# {section}\n\n{text}\n"
            )
            (folder / name).write_text(body, encoding="utf-8")
            count += 1
    code = out / "code"
    code.mkdir(parents=True, exist_ok=True)
    for module, docstring in module_docstrings():
        body = _front(title=f"Module {module}", kind="module", source=module.replace(".", "/") + ".py")
        (code / f"{module}.md").write_text(body + f"# Module `{module}`\n\n{docstring}\n", encoding="utf-8")
        count += 1
    return count


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--docs",
        nargs="*",
        type=Path,
        default=[ROOT / "README.md"],
        help="Markdown documents to split into sections (default: README.md)",
    )
    parser.add_argument("--out", type=Path, default=CORPUS, help=f"output folder (default: {CORPUS})")
    args = parser.parse_args(argv)
    count = build(args.docs, args.out)
    print(f"wrote {count} documents to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
