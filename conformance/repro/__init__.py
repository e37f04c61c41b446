"""Standalone reproductions of defect entries: `pytest conformance/ --conformance-repro DIR`.

Per defect entry (conformance/report/defects.py) with a case that replays outside
pytest, one Python script in DIR that rebuilds the implementation the run
tested (the same factory string, `--sglang-live` or `--sglang` path) and
replays the smallest case found: an exploration schedule (shrunk first), a
decision-table state, or a storage error at the transfer the run failed.
The scripts import only this package and the user's code, and exit 1 while
the defect reproduces, naming its clause, 0 once it is gone.

  cases.py    which case of an entry can be replayed standalone, and why not
  shrink.py   the smallest exploration schedule that still fails the clause
  script.py   the script's text
  runtime.py  what every script runs: options, building, the verdict, the exit status
  writer.py   the session's end: cases, shrinking, scripts, checked in this process
"""
