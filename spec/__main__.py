"""`python -m spec`: print the decision table; `clauses`, `clause ID`, `doc --write|--check`."""

from __future__ import annotations

import argparse
import sys

from spec import doc, table
from spec.clauses import CATALOGUE


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spec", description=__doc__)
    sub = parser.add_subparsers(dest="command")
    t = sub.add_parser("table", help="print the decision table (the default)")
    t.add_argument("--page-size", type=int, default=doc.TABLE_PAGE_SIZE)
    sub.add_parser("clauses", help="list clause IDs and titles")
    one = sub.add_parser("clause", help="print one clause: statement, rationale, upstream note and evidence")
    one.add_argument("id", help="a clause ID, e.g. D3")
    d = sub.add_parser("doc", help="regenerate or check spec/SPEC.md")
    mode = d.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite spec/SPEC.md")
    mode.add_argument("--check", action="store_true", help="exit 1 if spec/SPEC.md is stale")
    args = parser.parse_args(argv)

    if args.command in (None, "table"):
        page_size = getattr(args, "page_size", doc.TABLE_PAGE_SIZE)
        if page_size <= 0:
            parser.error(f"invalid --page-size: {page_size} (accepted: an integer > 0)")
        sys.stdout.write(table.render_text(page_size))
        return 0
    if args.command == "clauses":
        for c in CATALOGUE.values():
            print(f"{c.id}\t{c.title}")
        return 0
    if args.command == "clause":
        try:
            sys.stdout.write(doc.render_clause(args.id.upper()))
        except ValueError as exc:
            print(f"python -m spec clause: {exc}", file=sys.stderr)
            return 2
        return 0
    if args.write:
        doc.write()
        print(f"wrote {doc.DOC_PATH}")
        return 0
    if doc.is_stale():
        print(f"{doc.DOC_PATH} is stale: run `python -m spec doc --write`", file=sys.stderr)
        return 1
    print(f"{doc.DOC_PATH} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
