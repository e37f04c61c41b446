"""hicache-lint: keeps every implementation's prefetch-termination guard in place.

Library use: `lint.api.lint_paths(paths, config)`; command line: `python -m lint`.
"""

__version__ = "0.1.0"
