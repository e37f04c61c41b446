"""Page hashes: an independent hashlib + struct oracle, chaining and input checks."""

import hashlib
import struct

import pytest
import torch

from caches.core.hashing import TOKEN_ID_LIMIT, page_hash, page_hashes


def oracle_hash(prev_hex, tokens):
    """Spec formula written out token by token: SHA-256(prev bytes || u32le tokens)."""
    digest = hashlib.sha256()
    if prev_hex is not None:
        digest.update(bytes.fromhex(prev_hex))
    for token in tokens:
        digest.update(struct.pack("<I", token))
    return digest.hexdigest()


def test_first_page_matches_the_oracle_and_a_spelled_out_byte_string():
    tokens = [1, 2, 0xDEADBEEF, 0]
    expected_bytes = (
        b"\x01\x00\x00\x00" b"\x02\x00\x00\x00" b"\xef\xbe\xad\xde" b"\x00\x00\x00\x00"
    )
    assert page_hash(None, tokens) == hashlib.sha256(expected_bytes).hexdigest()
    assert page_hash(None, tokens) == oracle_hash(None, tokens)


def test_hash_is_lowercase_hex_of_sha256_length():
    value = page_hash(None, [7, 8])
    assert len(value) == 64
    assert value == value.lower()
    int(value, 16)


def test_chained_page_prepends_previous_hash_bytes():
    first = page_hash(None, [5, 6])
    second = page_hash(first, [7, 8])
    assert second == oracle_hash(first, [7, 8])
    assert second == hashlib.sha256(bytes.fromhex(first) + struct.pack("<2I", 7, 8)).hexdigest()
    # Same page tokens with another prefix hash differently: a hash names its prefix.
    assert page_hash(page_hash(None, [9, 9]), [7, 8]) != second
    assert page_hash(None, [7, 8]) != second


def test_page_hashes_chains_every_full_page():
    tokens = list(range(100, 112))
    hashes = page_hashes(tokens, 4)
    expected = []
    prev = None
    for start in range(0, 12, 4):
        prev = oracle_hash(prev, tokens[start : start + 4])
        expected.append(prev)
    assert hashes == expected


def test_page_hashes_continues_from_prev():
    tokens = list(range(16))
    whole = page_hashes(tokens, 4)
    assert page_hashes(tokens[8:], 4, prev=whole[1]) == whole[2:]


def test_trailing_partial_page_is_ignored():
    tokens = list(range(11))
    assert page_hashes(tokens, 4) == page_hashes(tokens[:8], 4)
    assert len(page_hashes(tokens, 4)) == 2
    assert page_hashes(tokens[:3], 4) == []


def test_tensor_tuple_and_list_inputs_agree():
    tokens = [3, 1, 4, 1, 5, 9, 2, 6]
    expected = page_hashes(tokens, 2)
    assert page_hashes(tuple(tokens), 2) == expected
    assert page_hashes(torch.tensor(tokens), 2) == expected
    assert page_hashes(torch.tensor(tokens, dtype=torch.int32), 2) == expected
    assert page_hash(None, torch.tensor(tokens[:2])) == expected[0]


def test_extreme_token_ids_are_accepted():
    assert page_hash(None, [0, TOKEN_ID_LIMIT - 1]) == oracle_hash(None, [0, 2**32 - 1])


@pytest.mark.parametrize("bad", [-1, 2**32, 2**40])
def test_token_out_of_range_names_value_and_range(bad):
    with pytest.raises(ValueError) as info:
        page_hash(None, [1, bad])
    message = str(info.value)
    assert str(bad) in message
    assert "[0, 4294967296)" in message
    assert "position 1" in message
    with pytest.raises(ValueError, match=str(bad)):
        page_hashes([0, 0, 1, bad], 2)


def test_non_integer_token_is_rejected():
    with pytest.raises(ValueError, match="1.5"):
        page_hash(None, [1, 1.5])


def test_bad_token_in_ignored_partial_page_is_not_hashed():
    assert page_hashes([1, 2, -1], 2) == [page_hash(None, [1, 2])]


@pytest.mark.parametrize("page_size", [0, -4, True, 1.0, "4"])
def test_page_size_must_be_a_positive_int(page_size):
    with pytest.raises(ValueError, match="page_size"):
        page_hashes([1, 2, 3, 4], page_size)


@pytest.mark.parametrize("prev", ["abc", "zz" * 32, "00" * 31, b"\x00" * 32])
def test_malformed_prev_is_rejected(prev):
    with pytest.raises(ValueError, match="prev"):
        page_hash(prev, [1])
    with pytest.raises(ValueError, match="prev"):
        page_hashes([1, 2], 2, prev=prev)
    with pytest.raises(ValueError, match="prev"):
        page_hashes([1], 2, prev=prev)
