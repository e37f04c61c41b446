"""SGLang's own cache objects, run live through the harness on CPU.

`pytest conformance/ --sglang-live PATH` builds upstream's real cache classes
(their controllers, PrefetchOperation, host pools and HiCacheFile backend,
their threads) from the SGLang tree at PATH, wraps each as a CacheUnderTest and
runs the architecture-neutral conformance tests on it. Nothing from upstream
lives in this repository: the tree is imported at run time, a few small
runtime shims (shims.py) make it run without CUDA, and the trace is recorded
by wrapping methods of upstream's own objects (taps/).

Modules, by concept:
  layout.py        what declares one upstream layout (a build of a class): its marks, modules, capabilities
  layouts/         every layout the harness runs, one package each: declaration, session, its own taps
  tree.py          find the SGLang package in a checkout, wheel or site-packages; its version and layouts
  evidence.py      what the tree's own code says (profile, deployment, a build's page size), as file:line
  shims.py         the named runtime shims (what each replaces and why)
  runtime.py       import the tree, apply the shims, start upstream's gloo process group
  session.py       a session composed of the seams below, behind the CacheUnderTest protocol
    configuration.py  ServerArgs and the extra config as a user sets them; C1/C2 through upstream's parsers
    tiers.py          device pools on CPU and a request's rows in them
    scheduler.py      upstream's steps on every rank alike, and the harness's own agreement
    threads.py        upstream's storage threads: alive, and what ended one (L5)
    sidecar.py        one extra pool of a cache, as a session drives and observes it
    probes.py         decision probes: an upstream operation in a spec state
  taps/            record spec.trace events from upstream's objects, one module per seam; the gates sit there
  collectives.py   collectives an upstream module calls through torch.distributed itself, reported to the taps
  adapter.py       the adapter the harness runs (rows `sglang-live:<layout>@<version>`)
  plugin.py        the --sglang-live option (one place, so it can move into a pytest plugin)
"""
