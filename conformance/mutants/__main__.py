import sys

from conformance.mutants.cli import main

sys.exit(main())
