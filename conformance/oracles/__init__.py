"""What every outcome is checked against, written apart from any implementation: the loaded bytes, the spec's invariants, slot accounting, a cache's end of life."""
