"""`/docs`: the OpenAPI document as one self-contained HTML page, rendered on the server.

Owns the page: operations grouped by tag (method, path, summary, `operationId`, parameters, request
body, responses) and every component schema, each linked from where it is referenced. Does not own the
document (`_routes.openapi`) or the route (`_routes.docs_page`).

Why server-side and not Swagger UI or Redoc: those are megabytes of JavaScript that must either come from
a CDN (a host that may run offline, behind a proxy, or under a strict CSP should not load code from
elsewhere) or be vendored and kept up to date; the packaged bundles on the index lag behind (one still
ships Swagger UI 4, which cannot read OpenAPI 3.1). A reader of the reference needs the operations and the
schemas, which a static page gives; a client is generated from `/openapi.json`.

Invariants:
- Every value taken from the document is HTML-escaped; the page has no script and loads nothing
  (`DOCS_HEADERS` carries a CSP that forbids both), so it works offline and behind any proxy.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable

from mcphost.protocol import JSONObject, JSONValue, is_json_array, is_json_object

DOCS_HEADERS: dict[str, str] = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}
"""The page is inert: inline style only, no scripts, no fetches, not framed."""

_REF = "#/components/schemas/"
_STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; max-width: 70rem; margin: 2rem auto; padding: 0 1rem; color: #222 }
code, pre { font: 13px/1.4 ui-monospace, monospace } pre { background: #f6f6f6; padding: .6rem; overflow-x: auto }
h2 { border-bottom: 1px solid #ccc; padding-bottom: .2rem; margin-top: 2.5rem }
section.op { border: 1px solid #ddd; border-radius: 4px; margin: 1rem 0; padding: .3rem 1rem }
.method { display: inline-block; min-width: 4.5rem; font-weight: bold; text-transform: uppercase }
table { border-collapse: collapse; margin: .4rem 0 } td, th { border: 1px solid #ddd; padding: .2rem .5rem;
text-align: left; vertical-align: top } nav a { margin-right: .8rem }
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _obj(value: JSONValue) -> JSONObject:
    """`value` when it is a JSON object, else an empty one (the page renders what is there)."""
    return value if is_json_object(value) else {}


def _arr(value: JSONValue) -> list[JSONValue]:
    return value if is_json_array(value) else []


def _schema_text(schema: JSONValue) -> str:
    """A schema in a line: a link for a `$ref`, `array of …`, else its compact JSON."""
    node = _obj(schema)
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith(_REF):
        name = ref.removeprefix(_REF)
        return f'<a href="#schema-{_e(name)}">{_e(name)}</a>'
    if node.get("type") == "array" and "items" in node:
        return f"array of {_schema_text(node['items'])}"
    return f"<code>{_e(json.dumps(schema, separators=(',', ':')))}</code>"


def _content_rows(content: JSONValue) -> Iterable[str]:
    for media, entry in _obj(content).items():
        yield f"<code>{_e(media)}</code>: {_schema_text(_obj(entry).get('schema', {}))}"


def _operation(path: str, method: str, op: JSONObject) -> str:
    op_id = str(op.get("operationId", ""))
    keyless = "; no API key" if op.get("security") == [] else ""
    out = [
        f'<section class="op" id="op-{_e(op_id)}">',
        f'<h3><span class="method">{_e(method)}</span> <code>{_e(path)}</code></h3>',
        f"<p>{_e(op.get('summary', ''))}</p>",
        f"<p>operationId <code>{_e(op_id)}</code>{keyless}</p>",
    ]
    if params := [_obj(p) for p in _arr(op.get("parameters"))]:
        out.append("<table><tr><th>parameter</th><th>in</th><th>required</th><th>schema</th><th></th></tr>")
        out.extend(
            f"<tr><td><code>{_e(p.get('name'))}</code></td><td>{_e(p.get('in'))}</td>"
            f"<td>{'yes' if p.get('required') else 'no'}</td><td>{_schema_text(p.get('schema', {}))}</td>"
            f"<td>{_e(p.get('description', ''))}</td></tr>"
            for p in params
        )
        out.append("</table>")
    if body := _obj(op.get("requestBody")):
        rows = "<br>".join(_content_rows(body.get("content")))
        out.append(f"<p>Request body{' (required)' if body.get('required') else ''}:<br>{rows}</p>")
    out.append("<table><tr><th>status</th><th></th><th>content</th></tr>")
    for status, answer in _obj(op.get("responses")).items():
        rows = "<br>".join(_content_rows(_obj(answer).get("content")))
        text = _e(_obj(answer).get("description", ""))
        out.append(f"<tr><td>{_e(status)}</td><td>{text}</td><td>{rows}</td></tr>")
    out.append("</table></section>")
    return "\n".join(out)


def render_docs(document: JSONObject) -> str:
    """The page for `document` (an OpenAPI 3.1 document as `_routes.openapi` builds it)."""
    info = _obj(document.get("info"))
    title = f"{info.get('title', 'API')} {info.get('version', '')}".strip()
    tags = [_obj(t) for t in _arr(document.get("tags"))]
    descriptions = {str(t.get("name")): str(t.get("description", "")) for t in tags}
    by_tag: dict[str, list[str]] = {name: [] for name in descriptions}
    for path, operations in _obj(document.get("paths")).items():
        for method, op in _obj(operations).items():
            tag = next((str(t) for t in _arr(_obj(op).get("tags"))), "other")
            by_tag.setdefault(tag, []).append(_operation(path, method, _obj(op)))
    nav = "".join(f'<a href="#tag-{_e(t)}">{_e(t)}</a>' for t in by_tag)
    out = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f"<p>{_e(info.get('description', ''))}</p>",
        '<p>The machine-readable document is <a href="openapi.json">/openapi.json</a>. Requests under '
        "<code>/v1</code> carry <code>Authorization: Bearer &lt;key&gt;</code> when the host has an API key.</p>",
        f'<nav>{nav}<a href="#schemas">schemas</a></nav>',
    ]
    for tag, sections in by_tag.items():
        out.append(f'<h2 id="tag-{_e(tag)}">{_e(tag)}</h2>')
        if descriptions.get(tag):
            out.append(f"<p>{_e(descriptions[tag])}</p>")
        out.extend(sections)
    out.append('<h2 id="schemas">Schemas</h2>')
    for name, schema in sorted(_obj(_obj(document.get("components")).get("schemas")).items()):
        out.append(f'<h3 id="schema-{_e(name)}">{_e(name)}</h3>')
        out.append(f"<pre>{_e(json.dumps(schema, indent=2, ensure_ascii=False))}</pre>")
    out.append("</body></html>")
    return "\n".join(out)
