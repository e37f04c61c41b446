"""SGLang's own cache objects, run live through the harness on CPU.

`pytest conformance/ --sglang-live PATH` builds upstream's real cache classes
(their controllers, PrefetchOperation, host pools and HiCacheFile backend,
their threads) from the SGLang tree at PATH, wraps each as a CacheUnderTest and
runs the architecture-neutral conformance tests on it. Nothing from upstream
lives in this repository: the tree is imported at run time, a few small
runtime shims (shims.py) make it run without CUDA, and the trace is recorded
by wrapping methods of upstream's own objects (taps.py).

Modules, by concept:
  tree.py         find the SGLang package in a checkout, wheel or site-packages; its version and cache classes
  shims.py        the named runtime shims (what each replaces and why)
  runtime.py      import the tree, apply the shims, start upstream's gloo process group
  taps.py         record spec.trace events from upstream's objects; the harness's gates sit there
  collectives.py  collectives an upstream module calls through torch.distributed itself, reported to the taps
  session.py      what every live session shares (configuration, the scheduler's calls, load-back)
  hiradix.py      HiRadixCache behind the CacheUnderTest protocol
  hi_mamba.py     HiMambaRadixCache (KV and its mamba state pool) behind the same protocol
  adapter.py      the adapter the harness runs (rows `sglang-live:<class>@<version>`)
  plugin.py       the --sglang-live option (one place, so it can move into a pytest plugin)
"""
