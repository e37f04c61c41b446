"""Mutation campaigns: how much of an implementation's protocol code the conformance suite guards.

    python -m conformance.mutants --cache-impl my_package.my_module:make_adapter

discovers the implementation's protocol functions (discovery.py, by the
vocabulary of roles.py, or the adapter's `mutation_targets`), applies each
single-point operator of the catalogue (operators.py, catalogue.py) one at
a time, at import time in every process of a suite run (importhook.py,
runner.py), and reports which mutants the suite killed and with which
clause (summary.py). docs/mutants.md says how to read the figures.

Importing this package loads nothing else: the campaign's pytest plugin
(first_failure.py) lives here and is loaded into every process of a run.
"""
