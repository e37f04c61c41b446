"""SARIF 2.1.0 output, for code-scanning services.

Each rule carries `help` (its description), `helpUri` and `properties`
(level, fixable, the spec clauses it keeps); each result a
`partialFingerprints` entry that does not move with line numbers, so a
finding keeps its identity when code above it changes.

helpUri scheme (stable, documented in lint/README.md): a rule that keeps
spec clauses links to `SPEC_URL#<first clause id, lower case>` (e.g. `#d3`);
the suppression rules link to `LINT_DOC_URL#suppression`.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePath

from lint.findings import fingerprint
from lint.result import Result
from lint.rules import ALL_RULES, Rule, level_of

TOOL = "hicache-lint"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
PROJECT_URL = "https://github.com/hicache-conformance/hicache-conformance"
SPEC_URL = f"{PROJECT_URL}/blob/main/spec/SPEC.md"
LINT_DOC_URL = f"{PROJECT_URL}/blob/main/lint/README.md"
FINGERPRINT = "hicacheLintFinding/v1"
SARIF_LEVELS = {"error": "error", "warning": "warning", "info": "note"}


def help_uri(rule: type[Rule]) -> str:
    if rule.clauses:
        return f"{SPEC_URL}#{rule.clauses[0].lower()}"
    return f"{LINT_DOC_URL}#suppression"


def _uri(path: str) -> dict:
    pure = PurePath(path)
    if pure.is_absolute() or ".." in pure.parts:
        # abspath, not resolve: a symbolic link loop must not stop the report
        return {"uri": Path(os.path.abspath(path)).as_uri()}
    return {"uri": pure.as_posix(), "uriBaseId": "%SRCROOT%"}


def _rule(rule: type[Rule]) -> dict:
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": rule.help()},
        "help": {"text": rule.help()},
        "helpUri": help_uri(rule),
        "defaultConfiguration": {"level": SARIF_LEVELS[rule.level]},
        "properties": {"fixable": rule.fixable, "suppressible": rule.suppressible,
                       "clauses": list(rule.clauses)},
    }


def sarif_document(result: Result, version: str) -> dict:
    index = {rule.code: i for i, rule in enumerate(ALL_RULES)}
    results = [
        {
            "ruleId": f.code,
            "ruleIndex": index[f.code],
            "level": SARIF_LEVELS[level_of(f.code)],
            "message": {"text": f.text},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": _uri(f.path),
                        "region": {"startLine": f.line, "startColumn": f.col},
                    }
                }
            ],
            "partialFingerprints": {FINGERPRINT: fingerprint(f)},
            "properties": {"fixable": f.fixable, "method": f.method},
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
    root = Path(os.path.abspath(os.getcwd())).as_uri() + "/"
    driver = {"name": TOOL, "version": version, "informationUri": LINT_DOC_URL,
              "rules": [_rule(rule) for rule in ALL_RULES]}
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": driver},
                "originalUriBaseIds": {"%SRCROOT%": {"uri": root}},
                "results": results,
                "invocations": [
                    {
                        "executionSuccessful": not result.errors,
                        "exitCode": result.exit_code,
                        "toolExecutionNotifications": notifications,
                    }
                ],
            }
        ],
    }
