"""The adapters module a pytester-generated project loads with --cache-impl (the option and report tests' suites)."""

ADAPTERS = '''
from caches.adapters import hiradix


def good():
    return hiradix()
'''
