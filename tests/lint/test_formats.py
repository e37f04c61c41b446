"""Output formats: text, json, github annotations, SARIF 2.1.0."""

from __future__ import annotations

import io
import json
import re

import pytest

from lint.api import Result, lint_paths
from lint.config import Config
from lint.findings import FileError, Finding
from lint.report import JSON_SCHEMA, WRITERS, version
from lint.rules import ALL_RULES, RULES_BY_CODE
from lint.sarif import FINGERPRINT, SPEC_URL, sarif_document

NEEDS_JSONSCHEMA = "jsonschema is needed to validate the SARIF and JSON documents (a test dependency)"


@pytest.fixture
def broken_result(samples, isolated):
    result = lint_paths([samples / "broken_variants.py.txt", isolated / "missing.py"], Config(root=isolated))
    assert result.findings and result.errors
    return result


def render(result: Result, fmt: str) -> str:
    out = io.StringIO()
    WRITERS[fmt](result, out)
    return out.getvalue()


def test_text_format(broken_result):
    lines = render(broken_result, "text").splitlines()
    assert len(lines) == len(broken_result.findings)
    pattern = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+):(?P<col>\d+): (?P<code>HC10\d) "
                         r"\[(?P<level>error|warning|info)\] (?P<msg>.+)$")
    for line, finding in zip(lines, broken_result.findings):
        match = pattern.match(line)
        assert match, line
        assert (int(match["line"]), int(match["col"]), match["code"], match["level"], match["msg"]) == (
            finding.line, finding.col, finding.code, RULES_BY_CODE[finding.code].level, finding.text)


def test_json_format(broken_result):
    doc = json.loads(render(broken_result, "json"))
    assert doc["tool"] == "hicache-lint" and doc["schema_version"] == 1
    assert {f["level"] for f in doc["findings"]} == {"error"}
    assert [(f["path"], f["line"], f["col"], f["code"]) for f in doc["findings"]] == [
        (f.path, f.line, f.col, f.code) for f in broken_result.findings
    ]
    assert {f["rule"] for f in doc["findings"]} >= {"guard-missing", "guard-key", "guard-placement"}
    assert all(isinstance(f["fixable"], bool) for f in doc["findings"])
    assert doc["errors"] == [{"path": "missing.py", "message": "no such file or directory"}]
    assert doc["summary"]["exit_code"] == 2
    assert doc["summary"]["findings"] == len(broken_result.findings)


def test_github_format(broken_result):
    lines = render(broken_result, "github").splitlines()
    assert len(lines) == len(broken_result.findings) + len(broken_result.errors)
    finding_line = re.compile(r"^::(error|warning) file=[^,:]+,line=\d+,col=\d+,title=HC10\d::[^\n]+$")
    assert all(finding_line.match(line) for line in lines[: len(broken_result.findings)])
    assert lines[-1] == "::error file=missing.py,title=hicache-lint::no such file or directory"


def test_github_escaping():
    result = Result(
        findings=[Finding("dir,x/a:b.py", 3, 1, "HC101", "50% done\nsecond line")],
        errors=[FileError("c.py", "bad: value, here")],
    )
    lines = render(result, "github").splitlines()
    assert lines == [
        "::error file=dir%2Cx/a%3Ab.py,line=3,col=1,title=HC101::50%25 done%0Asecond line",
        "::error file=c.py,title=hicache-lint::bad: value, here",
    ]


# The parts of the SARIF 2.1.0 schema this tool's output must satisfy.
SARIF_SUBSET = {
    "type": "object",
    "required": ["version", "runs"],
    "properties": {
        "version": {"const": "2.1.0"},
        "$schema": {"type": "string"},
        "runs": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["tool"],
                "properties": {
                    "tool": {
                        "type": "object",
                        "required": ["driver"],
                        "properties": {
                            "driver": {
                                "type": "object",
                                "required": ["name"],
                                "properties": {
                                    "name": {"type": "string"},
                                    "rules": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "required": ["id"],
                                            "properties": {
                                                "id": {"type": "string"},
                                                "shortDescription": {
                                                    "type": "object", "required": ["text"]},
                                                "fullDescription": {
                                                    "type": "object", "required": ["text"]},
                                                "defaultConfiguration": {
                                                    "type": "object",
                                                    "properties": {"level": {
                                                        "enum": ["none", "note", "warning", "error"]}},
                                                },
                                            },
                                        },
                                    },
                                },
                            }
                        },
                    },
                    "results": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["message"],
                            "properties": {
                                "ruleId": {"type": "string"},
                                "ruleIndex": {"type": "integer", "minimum": -1},
                                "level": {"enum": ["none", "note", "warning", "error"]},
                                "message": {"type": "object", "required": ["text"]},
                                "locations": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "properties": {
                                            "physicalLocation": {
                                                "type": "object",
                                                "properties": {
                                                    "artifactLocation": {
                                                        "type": "object",
                                                        "properties": {"uri": {"type": "string"}},
                                                    },
                                                    "region": {
                                                        "type": "object",
                                                        "properties": {
                                                            "startLine": {"type": "integer", "minimum": 1},
                                                            "startColumn": {"type": "integer", "minimum": 1},
                                                        },
                                                    },
                                                },
                                            }
                                        },
                                    },
                                },
                            },
                        },
                    },
                    "invocations": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["executionSuccessful"],
                            "properties": {"executionSuccessful": {"type": "boolean"}},
                        },
                    },
                },
            },
        },
    },
}


def test_sarif_document(broken_result):
    doc = json.loads(render(broken_result, "sarif"))
    assert doc == json.loads(json.dumps(sarif_document(broken_result, version())))
    assert doc["version"] == "2.1.0"
    (run,) = doc["runs"]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [r.code for r in ALL_RULES]
    assert all(r["shortDescription"]["text"] and r["fullDescription"]["text"] and r["help"]["text"]
               for r in rules)
    assert run["tool"]["driver"]["informationUri"].endswith("lint/README.md")
    by_id = {r["id"]: r for r in rules}
    assert by_id["HC101"]["helpUri"] == SPEC_URL + "#d3"
    assert by_id["HC103"]["helpUri"] == SPEC_URL + "#x3"
    assert by_id["HC105"]["helpUri"].endswith("lint/README.md#suppression")
    assert by_id["HC107"]["defaultConfiguration"]["level"] == "warning"
    assert len(run["results"]) == len(broken_result.findings)
    for result, finding in zip(run["results"], broken_result.findings):
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"] == finding.code
        location = result["locations"][0]["physicalLocation"]
        assert location["artifactLocation"]["uri"].endswith("broken_variants.py.txt")
        assert location["region"] == {"startLine": finding.line, "startColumn": finding.col}
        assert len(result["partialFingerprints"][FINGERPRINT]) == 32
    invocation = run["invocations"][0]
    assert invocation["executionSuccessful"] is False
    assert invocation["toolExecutionNotifications"][0]["message"]["text"] == "no such file or directory"


def test_sarif_validates_against_schema_subset(broken_result):
    jsonschema = pytest.importorskip("jsonschema", reason=NEEDS_JSONSCHEMA)
    jsonschema.validate(json.loads(render(broken_result, "sarif")), SARIF_SUBSET)


def test_json_validates_against_its_schema(broken_result, samples):
    jsonschema = pytest.importorskip("jsonschema", reason=NEEDS_JSONSCHEMA)
    jsonschema.validate(json.loads(render(broken_result, "json")), JSON_SCHEMA)
    with_warnings = lint_paths([samples / "upstream" / "hiradix_fixed.py.txt"], fixability=True)
    doc = json.loads(render(with_warnings, "json"))
    jsonschema.validate(doc, JSON_SCHEMA)
    assert [(f["code"], f["level"]) for f in doc["findings"]] == [("HC107", "warning")]
    assert doc["summary"]["exit_code"] == 0
    bad = dict(doc, schema_version=2)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, JSON_SCHEMA)


def test_fingerprints_survive_moved_lines(samples, tmp_path):
    text = (samples / "broken_variants.py.txt").read_text()
    path = tmp_path / "a.py"
    runs = []
    for prefix in ("", "\n\n\n"):  # three lines inserted above everything
        path.write_text(prefix + text)
        runs.append(sarif_document(lint_paths([path], Config(root=tmp_path)), "x")["runs"][0]["results"])
    prints = [[r["partialFingerprints"][FINGERPRINT] for r in run] for run in runs]
    lines = [[r["locations"][0]["physicalLocation"]["region"]["startLine"] for r in run] for run in runs]
    assert [b - a for a, b in zip(*lines)] == [3, 3, 3, 3]
    assert prints[0] == prints[1]
    assert len(set(prints[0])) == 4  # distinct per finding


def test_sarif_clean_run():
    doc = sarif_document(Result(), "x")
    assert doc["runs"][0]["results"] == []
    assert doc["runs"][0]["invocations"][0]["executionSuccessful"] is True


def test_cli_formats_parse(samples, run_cli, tmp_path):
    for fmt in ("json", "sarif"):
        proc = run_cli("--format", fmt, str(samples / "broken_variants.py.txt"), cwd=tmp_path)
        assert proc.returncode == 1, proc.stderr
        assert json.loads(proc.stdout)
    proc = run_cli("--format", "github", str(samples / "broken_variants.py.txt"), cwd=tmp_path)
    assert proc.returncode == 1
    assert all(line.startswith("::error file=") for line in proc.stdout.splitlines())
