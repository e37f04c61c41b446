"""What an implementation under test is, apart from pytest: how adapters are loaded (entry points, a
checkout's classes), what each declares (profile, clauses, preconditions), the capabilities a test can
require, the devices a run covers and a test's requirements. The pytest plugin (conformance/plugin/)
and every other part of conformance/ import this package; it imports nothing of the plugin.
"""
