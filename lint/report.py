"""Output formats: text, json, github (workflow annotations), sarif (2.1.0)."""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePath
from typing import Callable, TextIO

from lint.api import Result
from lint.rules import ALL_RULES, RULES_BY_CODE, level_of

FORMATS = ("text", "json", "github", "sarif")
TOOL = "hicache-lint"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def _version() -> str:
    from lint import __version__

    return __version__


def write_text(result: Result, out: TextIO) -> None:
    for finding in result.findings:
        out.write(f"{finding}\n")


def write_json(result: Result, out: TextIO) -> None:
    doc = {
        "tool": TOOL,
        "version": _version(),
        "findings": [
            {
                "path": f.path,
                "line": f.line,
                "col": f.col,
                "code": f.code,
                "rule": RULES_BY_CODE[f.code].name,
                "message": f.message,
                "method": f.method,
                "fixable": f.fixable,
            }
            for f in result.findings
        ],
        "errors": [{"path": e.path, "message": e.message} for e in result.errors],
        "fixed": list(result.fixed),
        "summary": {
            "files_seen": result.files_seen,
            "files_parsed": result.files_parsed,
            "methods": result.methods,
            "findings": len(result.findings),
            "errors": len(result.errors),
            "exit_code": result.exit_code,
        },
    }
    json.dump(doc, out, indent=2)
    out.write("\n")


def _gh_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_prop(text: str) -> str:
    return _gh_data(text).replace(":", "%3A").replace(",", "%2C")


def write_github(result: Result, out: TextIO) -> None:
    for f in result.findings:
        out.write(
            f"::error file={_gh_prop(f.path)},line={f.line},col={f.col},"
            f"title={_gh_prop(f.code)}::{_gh_data(f.message)}\n"
        )
    for e in result.errors:
        out.write(f"::error file={_gh_prop(e.path)},title={TOOL}::{_gh_data(e.message)}\n")


def _uri(path: str) -> dict:
    pure = PurePath(path)
    if pure.is_absolute() or ".." in pure.parts:
        return {"uri": Path(path).resolve().as_uri()}
    return {"uri": pure.as_posix(), "uriBaseId": "%SRCROOT%"}


def sarif_document(result: Result) -> dict:
    rules = [
        {
            "id": rule.code,
            "name": rule.name,
            "shortDescription": {"text": rule.summary},
            "fullDescription": {"text": rule.help()},
            "defaultConfiguration": {"level": rule.level},
            "properties": {"fixable": rule.fixable},
        }
        for rule in ALL_RULES
    ]
    index = {rule.code: i for i, rule in enumerate(ALL_RULES)}
    results = [
        {
            "ruleId": f.code,
            "ruleIndex": index[f.code],
            "level": level_of(f.code),
            "message": {"text": f.message},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": _uri(f.path),
                        "region": {"startLine": f.line, "startColumn": f.col},
                    }
                }
            ],
        }
        for f in result.findings
    ]
    notifications = [
        {
            "level": "error",
            "message": {"text": e.message},
            "locations": [{"physicalLocation": {"artifactLocation": _uri(e.path)}}],
        }
        for e in result.errors
    ]
    root = Path(os.getcwd()).resolve().as_uri() + "/"
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": {"name": TOOL, "version": _version(), "rules": rules}},
                "originalUriBaseIds": {"%SRCROOT%": {"uri": root}},
                "results": results,
                "invocations": [
                    {
                        "executionSuccessful": not result.errors,
                        "toolExecutionNotifications": notifications,
                    }
                ],
            }
        ],
    }


def write_sarif(result: Result, out: TextIO) -> None:
    json.dump(sarif_document(result), out, indent=2)
    out.write("\n")


WRITERS: dict[str, Callable[[Result, TextIO], None]] = {
    "text": write_text,
    "json": write_json,
    "github": write_github,
    "sarif": write_sarif,
}
