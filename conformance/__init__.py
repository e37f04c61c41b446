"""The conformance suite: the adapter protocol, the pytest plugin and harness, the suite, its report.

Folders by job: plugin/ (options, adapters, devices, fixtures), suite/ (the
conformance tests), scenarios/ (data, gates, races, systematic exploration),
oracles/ (what every outcome is checked against), multirank/ (real rank
processes), live/ (SGLang's own objects), report/ (records, verdicts, defect
entries, renderers), repro/ (standalone reproduction scripts), mutants/
(mutation campaigns). Importing this package imports nothing else.
"""

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
