"""Several vote groups: the rank partitions a cache accepts, and one clear line for anything else.

Real groups (four gloo ranks as 2x2) run in conformance/suite/test_multirank.py.
"""

from __future__ import annotations

import pytest
import torch.distributed as dist

from caches.config import CacheConfig
from caches.core.process_groups import checked_partitions
from caches.unified_radix import UnifiedRadixCache
from spec.errors import ConfigError


def test_partitions_that_split_every_rank_once_are_accepted():
    got = checked_partitions({"attn_tp": [[1, 0], [2, 3]], "attn_cp": [(0, 2), (1, 3)]}, 4)
    assert got == {"attn_tp": [[0, 1], [2, 3]], "attn_cp": [[0, 2], [1, 3]]}


@pytest.mark.parametrize("partitions, field", [
    ({"attn_tp": [[0, 1], [1, 2, 3]]}, "process_groups['attn_tp']"),  # rank 1 twice
    ({"attn_tp": [[0, 1], [2]]}, "process_groups['attn_tp']"),  # rank 3 missing
    ({"attn_tp": [[0, 1], []]}, "process_groups['attn_tp']"),
    ({"pp": [[0, 1, 2, 3]]}, "process_groups"),
    ({}, "process_groups"),
    ([[0, 1, 2, 3]], "process_groups"),
])
def test_bad_partitions_are_one_line_naming_the_field(partitions, field):
    with pytest.raises(ConfigError) as err:
        checked_partitions(partitions, 4)
    assert str(err.value).startswith(f"invalid {field}:") and "\n" not in str(err.value)


def test_a_cache_refuses_groups_without_torch_distributed_or_with_a_single_group_too(tmp_path):
    if dist.is_initialized():
        pytest.skip("a process group is initialized in this process")
    config = CacheConfig(storage_backend="memory")
    with pytest.raises(ConfigError, match="invalid process_groups: .*initialized torch.distributed"):
        UnifiedRadixCache(config, process_groups={"attn_tp": [[0]]})
    with pytest.raises(ConfigError, match="one of process_group .* or process_groups"):
        UnifiedRadixCache(config, process_group=object(), process_groups={"attn_tp": [[0]]})
