import math

import pytest

from spec import ConfigError, Policy, TerminationConfig


def test_defaults_match_upstream():
    cfg = TerminationConfig()
    assert cfg.policy is Policy.BEST_EFFORT
    assert (cfg.timeout_base_s, cfg.timeout_per_ki_token_s, cfg.timeout_max_s) == (2.0, 0.1, 30.0)


@pytest.mark.parametrize("name", ["best_effort", "wait_complete", "timeout"])
def test_policy_strings_parse(name):
    assert TerminationConfig(policy=name).policy.value == name


@pytest.mark.parametrize(
    "kwargs, field, fragment",
    [
        ({"policy": "wait-complete"}, "policy", "'best_effort', 'wait_complete', 'timeout'"),
        ({"policy": None}, "policy", "one of"),
        ({"policy": "TIMEOUT"}, "policy", "one of"),
        ({"page_size": 0}, "page_size", "an integer > 0"),
        ({"page_size": -16}, "page_size", "an integer > 0"),
        ({"page_size": 16.0}, "page_size", "an integer > 0"),
        ({"page_size": True}, "page_size", "an integer > 0"),
        ({"timeout_base_s": 0}, "timeout_base_s", "> 0"),
        ({"timeout_base_s": -1.0}, "timeout_base_s", "> 0"),
        ({"timeout_base_s": math.inf}, "timeout_base_s", "finite"),
        ({"timeout_base_s": math.nan}, "timeout_base_s", "finite"),
        ({"timeout_base_s": "2"}, "timeout_base_s", "finite"),
        ({"timeout_per_ki_token_s": -0.1}, "timeout_per_ki_token_s", ">= 0"),
        ({"timeout_max_s": 0.0}, "timeout_max_s", "> 0"),
        ({"timeout_max_s": 1.0}, "timeout_max_s", ">= timeout_base_s (2.0)"),
    ],
)
def test_bad_config_is_one_clear_line(kwargs, field, fragment):
    with pytest.raises(ConfigError) as info:
        TerminationConfig(**kwargs)
    err = info.value
    message = str(err)
    assert err.field == field
    assert "\n" not in message
    assert message.startswith(f"invalid {field}: {kwargs[field]!r}")
    assert fragment in message


def test_config_error_is_a_value_error():
    with pytest.raises(ValueError):
        TerminationConfig(page_size=0)


def test_from_mapping_rejects_unknown_fields():
    with pytest.raises(ConfigError, match=r"invalid timeout_s: 5 \(accepted: a known field: policy, page_size"):
        TerminationConfig.from_mapping({"policy": "timeout", "timeout_s": 5})


def test_from_mapping_builds_a_valid_config():
    cfg = TerminationConfig.from_mapping({"policy": "timeout", "page_size": 64, "timeout_max_s": 10.0})
    assert cfg.policy is Policy.TIMEOUT and cfg.page_size == 64 and cfg.timeout_max_s == 10.0


def test_max_equal_to_base_is_accepted():
    assert TerminationConfig(timeout_base_s=3.0, timeout_max_s=3.0).timeout_max_s == 3.0
