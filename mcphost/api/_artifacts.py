"""The artifact endpoints: upload (a raw body, or `multipart/form-data` with a `file` part), metadata, and
downloads with single byte ranges.

Owns reading a multipart body part by part (python-multipart's streaming parser), the upload's form and query handling, `Range` parsing (`parse_range`)
and the download headers. Does not own blobs, integrity or ids (`stores/artifacts.py`) or error responses
(`_errors`).

Invariants:
- Uploads stream into the artifact store under a cap (the upload limit, plus `MULTIPART_OVERHEAD_BYTES`
  around a multipart body); nothing is buffered whole, and the query and form are validated before the
  file's bytes are read.
- A form field is given once (in the query or the form); the file part is the last part read.
- Downloads are served as stored (`Content-Type` unchanged, `nosniff`, `sandbox`, an attachment); one
  `bytes=` range answers 206, anything else the whole content, an unsatisfiable range 416. The byte
  stream behind a download is closed (shielded) however the response ends.
"""

from __future__ import annotations

import logging
import re
import time
import urllib.parse
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import anyio
from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from mcphost.api._http import capped_body, parse_model, parse_query, path_id
from mcphost.api._models import MIME_PATTERN, QueryModel, UploadQuery
from mcphost.api._state import api_state
from mcphost.common.timestamps import json_with_iso
from mcphost.errors import InvalidArgumentError, RangeNotSatisfiableError
from mcphost.stores import ArtifactRecord

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks  # a TypedDict defined for type checkers only

logger = logging.getLogger("mcphost.api")

MULTIPART_OVERHEAD_BYTES = 1024 * 1024
"""Room for part headers and small form fields around an uploaded file."""
_ASCII_NAME = re.compile(r"^[\x20-\x7e]*$")


# -- endpoints: artifacts ----------------------------------------------------------------------------


def _malformed(why: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"body: malformed multipart/form-data: {why}.")


def _options(value: str) -> tuple[str, dict[str, str]]:
    """A header's value and parameters (`form-data; name="file"`), as python-multipart reads them."""
    kind, params = parse_options_header(value.encode("latin-1", errors="replace"))
    decoded = {k.decode("latin-1").lower(): v.decode("utf-8", errors="replace") for k, v in params.items()}
    return kind.decode("latin-1"), decoded


_Headers = dict[str, str]
_Event = (
    tuple[Literal["headers"], _Headers]
    | tuple[Literal["data"], bytes]
    | tuple[Literal["part_end", "end"], None]
)


class _Form:
    """A `multipart/form-data` body read part by part: python-multipart's push parser is fed one chunk
    at a time, so a part's bytes stream out as they arrive and nothing is buffered whole."""

    FIELD_LIMIT = 4 * 1024

    def __init__(self, chunks: AsyncIterator[bytes], boundary: str) -> None:
        self._chunks = chunks
        self._events: deque[_Event] = deque()
        self._headers: _Headers = {}
        self._name = bytearray()
        self._value = bytearray()

        def on_header_end() -> None:
            self._headers[self._name.decode("latin-1").strip().lower()] = self._value.decode(
                "latin-1"
            ).strip()
            self._name.clear()
            self._value.clear()

        def on_headers_finished() -> None:
            self._events.append(("headers", self._headers))
            self._headers = {}

        callbacks: MultipartCallbacks = {
            "on_header_field": lambda data, start, end: self._name.extend(data[start:end]),
            "on_header_value": lambda data, start, end: self._value.extend(data[start:end]),
            "on_header_end": on_header_end,
            "on_headers_finished": on_headers_finished,
            "on_part_data": lambda data, start, end: self._events.append(("data", data[start:end])),
            "on_part_end": lambda: self._events.append(("part_end", None)),
            "on_end": lambda: self._events.append(("end", None)),
        }
        self._parser = MultipartParser(boundary, callbacks, max_header_count=8, max_header_size=4096)

    async def _next(self) -> _Event:
        while not self._events:
            try:
                chunk = await anext(self._chunks)
            except StopAsyncIteration:
                raise _malformed("the body ended before the closing boundary") from None
            try:
                self._parser.write(chunk)
            except MultipartParseError as exc:
                raise _malformed(str(exc).rstrip(".")) from None
        return self._events.popleft()

    async def next_part(self) -> _Headers | None:
        """The next part's headers (names in lower case), or None after the closing boundary."""
        event = await self._next()
        if event[0] == "end":
            return None
        assert event[0] == "headers", "each part is read to its end before the next is asked for"
        return event[1]

    async def body(self) -> AsyncGenerator[bytes, None]:
        """The current part's bytes."""
        while (event := await self._next())[0] == "data":
            if event[1]:
                yield event[1]

    async def field(self) -> str:
        data = bytearray()
        async for piece in self.body():
            data += piece
            if len(data) > self.FIELD_LIMIT:
                raise _malformed(f"a form field is longer than {self.FIELD_LIMIT} bytes")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise _malformed("a form field is not UTF-8") from None


@dataclass
class _Upload:
    chunks: AsyncIterator[bytes]
    query: UploadQuery
    filename: str | None
    content_type: str | None


async def _multipart_upload(
    request: Request, query_data: dict[str, str], limit: int, boundary: str
) -> _Upload:
    form = _Form(capped_body(request, limit), boundary)
    fields: dict[str, str] = dict(query_data)
    while (headers := await form.next_part()) is not None:
        disposition = headers.get("content-disposition")
        if disposition is None:
            raise _malformed("a part has no Content-Disposition")
        _, params = _options(disposition)
        name, filename = params.get("name"), params.get("filename")
        if filename is not None or name == "file":
            query = parse_model(UploadQuery, fields, "form")
            return _Upload(form.body(), query, filename, headers.get("content-type"))
        if name is None:
            raise _malformed("a part has no name")
        if name not in UploadQuery.model_fields:
            known = ", ".join(["file", *UploadQuery.model_fields])
            raise InvalidArgumentError(f"form.{name[:50]}: unknown form field; known: {known}.")
        if name in fields:
            raise InvalidArgumentError(
                f"form.{name}: given more than once (in the query or the form); pass it once."
            )
        fields[name] = await form.field()
    raise InvalidArgumentError(
        "form.file: the multipart body has no file part; send the file as a part named 'file'."
    )


async def upload_artifact(request: Request) -> Response:
    state = api_state(request)
    cap = state.limits.max_upload_bytes
    query_data: dict[str, str] = {}
    for key, value in request.query_params.multi_items():
        if key in query_data:
            raise InvalidArgumentError(f"query.{key}: given more than once; pass it once.")
        query_data[key] = value
    content_type = request.headers.get("content-type", "")
    if content_type.lower().startswith("multipart/form-data"):
        boundary = _options(content_type)[1].get("boundary")
        if not boundary or len(boundary) > 70:
            raise InvalidArgumentError(
                "header Content-Type: multipart/form-data needs a boundary of 1 to 70 characters."
            )
        parse_model(UploadQuery, query_data, "query")
        upload = await _multipart_upload(request, query_data, cap + MULTIPART_OVERHEAD_BYTES, boundary)
    else:
        upload = _Upload(
            capped_body(request, cap),
            parse_model(UploadQuery, query_data, "query"),
            None,
            content_type or None,
        )
    mime = upload.query.mime_type or (upload.content_type or "").strip() or "application/octet-stream"
    if not MIME_PATTERN.match(mime):
        raise InvalidArgumentError(
            f"Content-Type {mime[:100]!r} is not a media type such as 'text/plain'; pass mime_type."
        )
    name = upload.query.name or upload.filename
    if name is not None and len(name) > 255:
        raise InvalidArgumentError("The file name is longer than 255 characters; pass a shorter name.")
    expires_in = upload.query.expires_in_s
    record = await state.stores.artifacts.put_stream(
        upload.chunks,
        name=name,
        mime_type=mime,
        max_bytes=cap,
        conversation_id=upload.query.conversation_id,
        expires_at=None if expires_in is None else time.time() + expires_in,
    )
    logger.info("artifact %s stored: %d bytes", record.artifact_id, record.size)
    return JSONResponse(
        json_with_iso(record.to_ref()),
        status_code=201,
        headers={"Location": f"/v1/artifacts/{record.artifact_id}"},
    )


async def artifact_metadata(request: Request) -> Response:
    state = api_state(request)
    parse_query(request, QueryModel)
    record = await state.stores.artifacts.get(path_id(request, "artifact_id"))
    return JSONResponse(json_with_iso(record))


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """(start, stop) of a single `bytes=` range, None to send everything.

    Another unit, or several ranges, are answered with the whole content (RFC 9110 lets a server ignore
    Range); a `bytes=` range that is malformed or starts past the end is `RangeNotSatisfiableError`.
    """
    if header is None:
        return None
    unit, sep, spec = header.strip().partition("=")
    if not sep or unit.strip().lower() != "bytes":
        return None
    if "," in spec:
        return None
    first, dash, last = spec.strip().partition("-")
    first, last = first.strip(), last.strip()
    unsatisfiable = RangeNotSatisfiableError(
        f"Range {header[:100]!r} cannot be satisfied: the artifact has {size} bytes.",
        details={"size": size},
    )
    if not dash or not (first or last) or not (first or "0").isdigit() or not (last or "0").isdigit():
        raise unsatisfiable
    if not first:  # suffix: the last N bytes
        count = int(last)
        if count == 0 or size == 0:
            raise unsatisfiable
        return max(size - count, 0), size
    start = int(first)
    stop = size if not last else min(int(last) + 1, size)
    if start >= size or (last and int(last) < start):
        raise unsatisfiable
    return start, stop


async def _closing(chunks: AsyncIterator[bytes]) -> AsyncGenerator[bytes, None]:
    """`chunks`, closed (shielded) however iteration ends, so a file or connection behind it is released."""
    try:
        async for chunk in chunks:
            yield chunk
    finally:
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            with anyio.CancelScope(shield=True):
                await aclose()


def _disposition(name: str | None) -> str:
    if not name:
        return "attachment"
    fallback = name if _ASCII_NAME.match(name) and '"' not in name and "\\" not in name else "download"
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{urllib.parse.quote(name, safe='')}"


async def artifact_content(request: Request) -> Response:
    state = api_state(request)
    parse_query(request, QueryModel)
    artifact_id = path_id(request, "artifact_id")
    record: ArtifactRecord = await state.stores.artifacts.get(artifact_id)
    span = parse_range(request.headers.get("range"), record.size)
    start, stop = span if span is not None else (0, record.size)
    record, chunks = await state.stores.artifacts.open_range(artifact_id, start, stop - start)
    headers = {
        "Accept-Ranges": "bytes",
        "Content-Length": str(stop - start),
        "ETag": f'"{record.sha256}"',
        "Content-Disposition": _disposition(record.name),
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "sandbox",
        "Cache-Control": "private, no-cache",
        "Content-Type": record.mime_type,  # as stored: no charset is guessed for text types
    }
    if span is not None:
        headers["Content-Range"] = f"bytes {start}-{stop - 1}/{record.size}"

    return StreamingResponse(_closing(chunks), status_code=206 if span is not None else 200, headers=headers)
