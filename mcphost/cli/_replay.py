"""`mcphost record export RUN_ID [-o FILE]` and `mcphost replay RUN_ID | --suite DIR [--junit FILE]`.

Owns reading recordings for these commands (from the database or a folder of exports), printing reports
and writing JUnit XML. Does not own the recording format (`mcphost/recording.py`) nor running and
comparing a replay (`mcphost/replay.py`).

Invariants: `replay` exits 0 when nothing diverged, 1 when something did, 2 on an error (an unknown or
unrecorded run, an unknown runner, a malformed export), which is one line on stderr, never a traceback.
With `--json` it prints exactly one document. `--suite` replays every `*.json` file of DIR in name
order; a file that cannot be replayed (refused as a recording, `recording.read_document`, or failing
to start) is an error testcase and makes the exit code 2, and the other files are still replayed:
each is judged alone, and nothing of a refused one runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from mcphost.app import open_database
from mcphost.cli._common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, dump, fail
from mcphost.config import Settings
from mcphost.errors import HostError, find_error
from mcphost.recording import RecordingDocument, export_recording, read_document
from mcphost.replay import ReplayReport, render, replay_document


async def cmd_record(args: argparse.Namespace, settings: Settings) -> int:
    assert args.record_command == "export", args.record_command
    try:
        async with open_database(settings) as stores:
            document = await export_recording(stores, args.run_id)
    except Exception as exc:
        return _error(exc)
    text = json.dumps(document.model_dump(mode="json"), ensure_ascii=False, indent=1) + "\n"
    if args.output is None:
        sys.stdout.write(text)
        return EXIT_OK
    try:
        _write_text(Path(args.output), text)
    except OSError as exc:
        return fail(f"cannot write {args.output}: {exc.strerror or exc}", EXIT_USAGE)
    print(f"wrote the recording of {args.run_id} to {args.output}", file=sys.stderr)
    return EXIT_OK


async def cmd_replay(args: argparse.Namespace, settings: Settings) -> int:
    if (args.run_id is None) == (args.suite is None):
        return fail("name a recorded RUN_ID or --suite DIR (one of them)", EXIT_USAGE)
    if args.junit is not None and args.suite is None:
        return fail("--junit goes with --suite DIR", EXIT_USAGE)
    if args.suite is not None:
        return await _suite(args, settings)
    try:
        async with open_database(settings) as stores:
            document = await export_recording(stores, args.run_id)
        report = await replay_document(document, settings, runner_id=args.runner)
    except Exception as exc:
        return _error(exc)
    if args.json:
        dump(report.model_dump(mode="json"))
    else:
        print(render(report))
    return EXIT_FAILED if report.diverged else EXIT_OK


def _error(exc: Exception) -> int:
    """An expected failure as one line and exit 2; anything else propagates (a bug: traceback)."""
    error = find_error(exc, HostError)
    if error is None:
        raise exc
    return fail(error.message, EXIT_USAGE)


async def _suite(args: argparse.Namespace, settings: Settings) -> int:
    folder = Path(args.suite)
    files = _recordings_in(folder)
    if files is None:
        return fail(f"--suite {folder}: not a folder of exported recordings", EXIT_USAGE)
    if not files:
        return fail(
            f"--suite {folder}: no *.json recordings in it (write them with `mcphost record export`)",
            EXIT_USAGE,
        )
    outcomes: list[tuple[Path, ReplayReport | str]] = []
    for path in files:
        try:
            document: RecordingDocument = read_document(path)
            report = await replay_document(document, settings, runner_id=args.runner)
        except Exception as exc:
            error = find_error(exc, HostError)
            if error is None:
                raise
            outcomes.append((path, error.message))
            continue
        outcomes.append((path, report))
    if args.junit is not None:
        try:
            _write_junit(Path(args.junit), folder, outcomes)
        except OSError as exc:
            return fail(f"cannot write {args.junit}: {exc.strerror or exc}", EXIT_USAGE)
    errors = sum(isinstance(o, str) for _, o in outcomes)
    diverged = sum(isinstance(o, ReplayReport) and o.diverged for _, o in outcomes)
    if args.json:
        dump(
            {
                "suite": str(folder),
                "diverged": diverged > 0,
                "errors": errors,
                "recordings": [
                    {"file": p.name, **({"error": o} if isinstance(o, str) else o.model_dump(mode="json"))}
                    for p, o in outcomes
                ],
            }
        )
    else:
        for path, outcome in outcomes:
            if isinstance(outcome, str):
                print(f"ERROR    {path.name}: {outcome}")
            else:
                print(f"{'DIVERGED' if outcome.diverged else 'ok':<8} {path.name}: {render(outcome)}")
        print(f"{len(outcomes)} recordings: {diverged} diverged, {errors} errors", file=sys.stderr)
    if errors:
        return EXIT_USAGE
    return EXIT_FAILED if diverged else EXIT_OK


def _write_text(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def _recordings_in(folder: Path) -> list[Path] | None:
    """The `*.json` files of `folder` in name order, or None when it is not a folder."""
    return sorted(folder.glob("*.json")) if folder.is_dir() else None


def _write_junit(path: Path, folder: Path, outcomes: list[tuple[Path, ReplayReport | str]]) -> None:
    """One testsuite; one testcase per recording: a `failure` holding the differences when it
    diverged, an `error` when it could not be replayed."""
    suite = ET.Element(
        "testsuite",
        name=f"mcphost replay {folder.name}",
        tests=str(len(outcomes)),
        failures=str(sum(isinstance(o, ReplayReport) and o.diverged for _, o in outcomes)),
        errors=str(sum(isinstance(o, str) for _, o in outcomes)),
    )
    for file, outcome in outcomes:
        case = ET.SubElement(suite, "testcase", classname="mcphost.replay", name=file.stem)
        if isinstance(outcome, str):
            ET.SubElement(case, "error", message=outcome).text = outcome
        elif outcome.diverged:
            count = len(outcome.differences) + len(outcome.unrecorded_calls)
            failure = ET.SubElement(
                case, "failure", message=f"run {outcome.run_id} diverged: {count} differences"
            )
            failure.text = render(outcome)
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)
