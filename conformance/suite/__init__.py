"""The conformance suite itself: the tests every implementation runs (`pytest conformance/`)."""
