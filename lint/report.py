"""Output formats: text, json, github (workflow annotations), sarif (2.1.0, lint/sarif.py).

The JSON document is versioned (`schema_version`); JSON_SCHEMA below is its
schema, and lint/README.md documents each field.
"""

from __future__ import annotations

import json
from typing import Callable, TextIO

from lint.result import Result
from lint.rules import RULES_BY_CODE, level_of
from lint.sarif import TOOL, sarif_document

JSON_SCHEMA_VERSION = 1


def version() -> str:
    from lint import __version__

    return __version__


def write_text(result: Result, out: TextIO) -> None:
    for f in result.findings:  # the level in brackets, as --list-rules shows it
        out.write(f"{f.path}:{f.line}:{f.col}: {f.code} [{level_of(f.code)}] {f.text}\n")


def json_document(result: Result) -> dict:
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "tool": TOOL,
        "version": version(),
        "findings": [
            {
                "path": f.path,
                "line": f.line,
                "col": f.col,
                "code": f.code,
                "rule": RULES_BY_CODE[f.code].name,
                "level": level_of(f.code),
                "message": f.text,
                "method": f.method,
                "fixable": f.fixable,
            }
            for f in result.findings
        ],
        "errors": [{"path": e.path, "message": e.message} for e in result.errors],
        "fixed": list(result.fixed),
        "not_fixed": list(result.declined),
        "summary": {
            "files_seen": result.files_seen,
            "files_parsed": result.files_parsed,
            "methods": result.methods,
            "findings": len(result.findings),
            "baselined": result.baselined,
            "errors": len(result.errors),
            "exit_code": result.exit_code,
        },
    }


def _gh_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_prop(text: str) -> str:
    return _gh_data(text).replace(":", "%3A").replace(",", "%2C")


GITHUB_LEVELS = {"error": "error", "warning": "warning", "info": "notice"}


def write_github(result: Result, out: TextIO) -> None:
    for f in result.findings:
        out.write(
            f"::{GITHUB_LEVELS[level_of(f.code)]} file={_gh_prop(f.path)},line={f.line},col={f.col},"
            f"title={_gh_prop(f.code)}::{_gh_data(f.text)}\n"
        )
    for e in result.errors:
        out.write(f"::error file={_gh_prop(e.path)},title={TOOL}::{_gh_data(e.message)}\n")


def _document_writer(document: Callable[[Result], dict]) -> Callable[[Result, TextIO], None]:
    def write(result: Result, out: TextIO) -> None:
        json.dump(document(result), out, indent=2)
        out.write("\n")

    return write


WRITERS: dict[str, Callable[[Result, TextIO], None]] = {
    "text": write_text,
    "json": _document_writer(json_document),
    "github": write_github,
    "sarif": _document_writer(lambda result: sarif_document(result, version())),
}

_STRING_LIST = {"type": "array", "items": {"type": "string"}}
_COUNT = {"type": "integer", "minimum": 0}

JSON_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "hicache-lint --format json",
    "type": "object",
    "required": ["schema_version", "tool", "version", "findings", "errors", "fixed", "not_fixed", "summary"],
    "additionalProperties": False,
    "properties": {
        "schema_version": {"const": JSON_SCHEMA_VERSION},
        "tool": {"const": TOOL},
        "version": {"type": "string"},
        "findings": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["path", "line", "col", "code", "rule", "level", "message", "method", "fixable"],
                "properties": {
                    "path": {"type": "string"},
                    "line": {"type": "integer", "minimum": 1},
                    "col": {"type": "integer", "minimum": 1},
                    "code": {"type": "string", "pattern": "^HC1[0-9]{2}$"},
                    "rule": {"type": "string"},
                    "level": {"enum": ["error", "warning", "info"]},
                    "message": {"type": "string"},
                    "method": {"type": ["string", "null"]},
                    "fixable": {"type": "boolean"},
                },
            },
        },
        "errors": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["path", "message"],
                "properties": {"path": {"type": "string"}, "message": {"type": "string"}},
            },
        },
        "fixed": _STRING_LIST,
        "not_fixed": _STRING_LIST,
        "summary": {
            "type": "object",
            "additionalProperties": False,
            "required": ["files_seen", "files_parsed", "methods", "findings", "baselined", "errors", "exit_code"],
            "properties": {
                "files_seen": _COUNT, "files_parsed": _COUNT, "methods": _COUNT,
                "findings": _COUNT, "baselined": _COUNT, "errors": _COUNT, "exit_code": {"enum": [0, 1, 2]},
            },
        },
    },
}
