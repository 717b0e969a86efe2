"""BodyDecoder on its own: every coding it undoes, its limit, and what it refuses.

Synchronous and without HTTP: the decoder is fed bytes and asked for the body, as
``_fetch.py`` does with each raw chunk off the wire.
"""

from __future__ import annotations

import functools
import gzip
import itertools
import random
import tracemalloc
import zlib
from collections.abc import Callable, Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_crawler._decoders import BodyDecoder, DecodingError, ResponseTooLarge

MIB = 1024 * 1024
TEXT = b"<html><body>" + b"".join(b'<a href="/p%d">page %d</a>\n' % (n, n) for n in range(500))


def decode(content_encoding: str, chunks: Iterable[bytes], max_size: int = MIB) -> bytes:
    decoder = BodyDecoder(content_encoding, max_size)
    for chunk in chunks:
        decoder.feed(chunk)
    return decoder.finish()


def zlib_deflate(data: bytes) -> bytes:
    return zlib.compress(data)


def raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-15)
    return compressor.compress(data) + compressor.flush()


def pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize(
    ("coding", "encode"),
    [
        ("gzip", gzip.compress),
        ("x-gzip", gzip.compress),
        ("GZip", gzip.compress),  # codings are case-insensitive (RFC 9110, section 8.4.1)
        ("deflate", zlib_deflate),
        ("deflate", raw_deflate),  # what some servers send as deflate
    ],
)
def test_each_coding_is_undone(coding: str, encode: Callable[[bytes], bytes]) -> None:
    encoded = encode(TEXT)
    assert encoded != TEXT
    assert decode(coding, [encoded]) == TEXT


def test_a_chains_inner_stage_keeps_what_the_limit_held_back() -> None:
    # Incompressible data: the inner (deflate) stage's output, gzip data as large as the
    # body, outgrows what is left under the limit long before the body does.
    body = random.Random(0).randbytes(10_000)
    encoded = zlib_deflate(gzip.compress(body))
    assert decode("gzip, deflate", [encoded], max_size=len(body)) == body
    assert decode("gzip, deflate", pieces(encoded, 7), max_size=len(body)) == body
    with pytest.raises(ResponseTooLarge):
        decode("gzip, deflate", [encoded], max_size=len(body) - 1)


def test_a_chain_is_undone_last_coding_first() -> None:
    # "gzip, deflate": gzip was applied first, then deflate; so deflate is undone first.
    encoded = zlib_deflate(gzip.compress(TEXT))
    assert decode("gzip, deflate", [encoded]) == TEXT
    assert decode(" gzip ,deflate ", [encoded]) == TEXT
    with pytest.raises(DecodingError):
        decode("deflate, gzip", [encoded])


@pytest.mark.parametrize("coding", ["", "identity", "br", "zstd", "compress"])
def test_a_coding_it_cannot_undo_is_kept_as_is(coding: str) -> None:
    encoded = gzip.compress(TEXT)  # whatever the bytes are, they come back unchanged
    assert decode(coding, [encoded]) == encoded


def test_an_unknown_coding_in_a_chain_is_kept_and_the_rest_undone() -> None:
    assert decode("br, gzip", [gzip.compress(b"brotli inside")]) == b"brotli inside"


def test_concatenated_gzip_members_are_one_body() -> None:
    members = gzip.compress(b"first member\n") + gzip.compress(b"second member\n")
    assert decode("gzip", [members]) == b"first member\nsecond member\n"
    assert decode("gzip", pieces(members, 3)) == b"first member\nsecond member\n"


def test_data_fed_a_byte_at_a_time() -> None:
    for coding, encoded in [
        ("gzip", gzip.compress(TEXT)),
        ("deflate", zlib_deflate(TEXT)),
        ("deflate", raw_deflate(TEXT)),
        ("gzip, deflate", zlib_deflate(gzip.compress(TEXT))),
    ]:
        assert decode(coding, pieces(encoded, 1)) == TEXT, coding


@pytest.mark.parametrize("coding", ["identity", "gzip", "deflate"])
def test_a_body_exactly_at_the_limit_passes_and_one_byte_over_does_not(coding: str) -> None:
    encode = {"identity": bytes, "gzip": gzip.compress, "deflate": zlib_deflate}[coding]
    exactly = b"x" * 1000
    assert decode(coding, pieces(encode(exactly), 100), max_size=1000) == exactly
    with pytest.raises(ResponseTooLarge, match=r"^body exceeds 1000 bytes$"):
        decode(coding, pieces(encode(exactly + b"y"), 100), max_size=1000)


def test_an_empty_body() -> None:
    assert decode("gzip", []) == b""
    assert decode("identity", [b""]) == b""


def test_prefix_after_the_limit_is_the_first_max_size_bytes() -> None:
    body = random.Random(0).randbytes(10_000)
    for coding, encoded in [("identity", body), ("gzip", gzip.compress(body))]:
        decoder = BodyDecoder(coding, 1000)
        with pytest.raises(ResponseTooLarge):  # noqa: PT012 - it raises in one of the feeds
            for chunk in pieces(encoded, 300):
                decoder.feed(chunk)
        assert decoder.prefix() == body[:1000], coding


@functools.cache
def gzip_bomb() -> bytes:
    """100 MiB of zeros in about 100 KiB of gzip, compressed without holding 100 MiB."""
    compressor = zlib.compressobj(9, wbits=16 + 15)
    zeros = bytes(MIB)
    return b"".join(compressor.compress(zeros) for _ in range(100)) + compressor.flush()


def test_a_gzip_bomb_stops_at_the_limit_with_bounded_memory() -> None:
    bomb = gzip_bomb()
    assert len(bomb) < MIB // 4
    decoder = BodyDecoder("gzip", MIB)
    tracemalloc.start()
    try:
        with pytest.raises(ResponseTooLarge):  # noqa: PT012 - it raises in one of the feeds
            for chunk in pieces(bomb, 64 * 1024):
                decoder.feed(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Inflating a 64 KiB read whole would make about 64 MiB at once; bounded, the decoder
    # holds the body so far and one allowance of output: a small multiple of the limit.
    assert peak < 4 * MIB, f"peak traced memory {peak / MIB:.1f} MiB"
    assert decoder.prefix() == bytes(MIB)


@pytest.mark.parametrize(
    ("coding", "data"),
    [
        ("gzip", b"not gzip at all"),
        ("gzip", gzip.compress(TEXT, mtime=0)[:10] + b"\xff" * 50),  # a header, then junk
        ("deflate", b"\xff\xff\xff\xff neither zlib nor raw deflate"),
        ("deflate", zlib_deflate(TEXT)[:-4] + b"\x00\x00\x00\x00"),  # a wrong checksum
    ],
    ids=["not-gzip", "gzip-junk-after-header", "not-deflate", "deflate-bad-checksum"],
)
def test_corrupt_data_is_a_decoding_error(coding: str, data: bytes) -> None:
    with pytest.raises(DecodingError):
        decode(coding, [data])


def test_a_truncated_stream_is_what_came() -> None:
    # Like httpx, a body cut short is not an error of the decoder: a stream simply ends.
    encoded = gzip.compress(TEXT)
    assert TEXT.startswith(decode("gzip", [encoded[: len(encoded) // 2]]))


# Each coding: its Content-Encoding header, its encoder, and zlib's own unbounded decode.
CODINGS: dict[str, tuple[str, Callable[[bytes], bytes], Callable[[bytes], bytes]]] = {
    "identity": ("identity", bytes, bytes),
    "gzip": ("gzip", gzip.compress, gzip.decompress),
    "deflate": ("deflate", zlib_deflate, zlib.decompress),
    "raw deflate": ("deflate", raw_deflate, lambda data: zlib.decompress(data, -15)),
    # Chains: the inner stage's output is the outer stage's input, so an inner stage asked
    # for no more than the limit must keep what it could not inflate yet.
    "gzip, deflate": (
        "gzip, deflate",
        lambda data: zlib_deflate(gzip.compress(data)),
        lambda data: gzip.decompress(zlib.decompress(data)),
    ),
    "gzip, gzip": (
        "gzip, gzip",
        lambda data: gzip.compress(gzip.compress(data)),
        lambda data: gzip.decompress(gzip.decompress(data)),
    ),
}


@settings(max_examples=200, deadline=None)
@given(
    body=st.one_of(st.binary(max_size=3000), st.binary(max_size=20).map(lambda b: b * 150)),
    coding=st.sampled_from(sorted(CODINGS)),
    cuts=st.lists(st.integers(min_value=0, max_value=5000), max_size=8),
    max_size=st.integers(min_value=0, max_value=4000),
)
def test_any_body_any_chunking_any_limit(
    body: bytes, coding: str, cuts: list[int], max_size: int
) -> None:
    header, encode, reference = CODINGS[coding]
    encoded = encode(body)
    bounds = [0, *sorted(cut % (len(encoded) + 1) for cut in cuts), len(encoded)]
    chunks = [encoded[start:end] for start, end in itertools.pairwise(bounds)]
    expected = reference(encoded)
    if len(expected) <= max_size:
        assert decode(header, chunks, max_size) == expected
    else:
        with pytest.raises(ResponseTooLarge, match=f"^body exceeds {max_size} bytes$"):
            decode(header, chunks, max_size)
