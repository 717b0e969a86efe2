"""Undoing a response's Content-Encoding without ever holding more than the crawl allows.

Theory of operation
-------------------
Why decoding is bounded. A body's size limit means nothing if it is checked after
decompression: 64 KiB of gzip can inflate to 64 MiB, and an HTTP library that inflates
each chunk off the wire in one call (as httpx does) allocates all of it before anyone can
count it, once per worker. :class:`BodyDecoder` instead asks zlib for at most the bytes
still allowed (``max_length``), so a gzip bomb costs no more memory than the limit: the
input zlib has not used yet waits in ``unconsumed_tail`` and is simply never asked for.

How a chain is undone. ``Content-Encoding: gzip, deflate`` lists the codings in the order
they were applied, so they are undone in reverse: deflate first, then gzip. Each coding is
one :class:`_Inflater` stage, and a chunk passes through every stage as it arrives; each
stage is asked only for what the limit still allows. A coding that is not gzip or deflate
(``identity``, or one we never asked for, such as ``br``) has no stage: its bytes are kept
as they are, as httpx keeps them. The crawler offers only ``gzip`` and ``deflate`` in
Accept-Encoding, which the standard library can undo.

Concatenated gzip members. RFC 1952 lets a gzip file be several members one after another,
and ``gzip -c a b`` makes such a file; it is one body. zlib stops at the end of a member
(``eof``) and leaves the rest in ``unused_data``, so the stage starts a new decompressor on
it.

The deflate fallback. RFC 9110 says ``deflate`` is zlib's format (a header, the deflate
data, a checksum), but some servers send raw deflate data without the header. A stage for
deflate tries zlib first, and if zlib rejects the first bytes it is given (at least two,
so that it can judge its two-byte header), starts again on them as raw deflate. Once zlib
has accepted a first piece, a later failure is corrupt data, not the other format.

Nothing here does I/O or knows about HTTP libraries: the decoder is fed bytes and asked for
the body, so it is tested on its own, synchronously.
"""

from __future__ import annotations

import zlib


class ResponseTooLarge(Exception):
    """A body grew past the crawl's size limit; the rest was not read."""


class DecodingError(Exception):
    """A body that its Content-Encoding cannot undo (corrupt gzip or deflate data)."""


class BodyDecoder:
    """Undo a Content-Encoding chain chunk by chunk, never producing more than allowed.

    Feed it the raw body as it arrives with :meth:`feed`, then take the body with
    :meth:`finish`. Either raises ResponseTooLarge as soon as the decoded body passes
    ``max_size`` (the first ``max_size`` bytes are then in :meth:`prefix`), and
    DecodingError for data the named encoding cannot undo.
    """

    def __init__(self, content_encoding: str, max_size: int) -> None:
        """Prepare to decode a body sent with ``content_encoding`` (a header's value)."""
        self._max_size = max_size
        self._size = 0
        self._parts: list[bytes] = []
        # "Content-Encoding: gzip, deflate" means deflate was applied last, so undone first.
        codings = [c.strip().lower() for c in content_encoding.split(",") if c.strip()]
        self._stages = [_Inflater(c) for c in reversed(codings) if c in _INFLATE_WBITS]

    def feed(self, data: bytes) -> None:
        """Decode the next raw chunk of the body."""
        self._pump(data)

    def finish(self) -> bytes:
        """The whole decoded body, once every raw chunk has been fed."""
        self._pump(b"")
        for index, stage in enumerate(self._stages):
            # What a stage still holds goes through the stages after it, and only them.
            self._pump(stage.flush(), start=index + 1)
        return b"".join(self._parts)

    def _pump(self, data: bytes, *, start: int = 0) -> None:
        """Run ``data`` through the stages from ``start`` on, until none holds input back.

        Each stage is asked for at most the bytes still allowed, so a stage may stop with
        input left over (a chain's inner stage whose output is larger than what remains of
        the limit); it keeps that input, and the next round carries on from it. Every round
        with input left over made at least one byte somewhere, and each stage's output is
        bounded by the allowance, so the rounds end and memory stays bounded.
        """
        stages = self._stages[start:]
        while True:
            for stage in stages:
                data = stage.inflate(data, self._allowance())
            self._take(data)
            if not any(stage.holds_input for stage in stages):
                return
            data = b""

    def prefix(self) -> bytes:
        """The first ``max_size`` bytes, once ResponseTooLarge has been raised."""
        return b"".join(self._parts)[: self._max_size]

    def _allowance(self) -> int:
        # One byte more than is allowed: enough to tell "too large" from "exactly full".
        return self._max_size - self._size + 1

    def _take(self, data: bytes) -> None:
        if not data:
            return
        self._size += len(data)
        self._parts.append(data)  # kept even when too much: prefix() may want its start
        if self._size > self._max_size:
            raise ResponseTooLarge(f"body exceeds {self._max_size} bytes")


# zlib's wbits per coding: 32+15 reads a gzip or a zlib header; deflate is tried as zlib
# first, as RFC 9110 says it is, and as raw deflate (-15) if that fails, as some servers send.
_INFLATE_WBITS = {"gzip": 32 + 15, "x-gzip": 32 + 15, "deflate": 15}
_RAW_DEFLATE_WBITS = -15


class _Inflater:
    """One stage of a chain: a gzip or deflate decompressor that is asked for at most so
    many bytes at a time."""

    def __init__(self, coding: str) -> None:
        self._wbits = _INFLATE_WBITS[coding]
        self._raw_fallback = coding == "deflate"
        self._zlib = zlib.decompressobj(self._wbits)
        self._started = False
        # deflate's first byte, when it came alone: zlib cannot judge its two-byte header
        # on one byte, so the choice between zlib and raw waits for the second.
        self._first_byte = b""
        # Input not inflated yet because the last call had made its ``limit``.
        self._held = b""

    @property
    def holds_input(self) -> bool:
        """Whether input is left over from the last call, to be inflated by the next."""
        return bool(self._held)

    def inflate(self, data: bytes, limit: int) -> bytes:
        """Inflate what is held and ``data``; at most ``limit`` bytes come out, and input
        left over is held for the next call."""
        data, self._held = self._held + data, b""
        if self._raw_fallback and not self._started:
            data, self._first_byte = self._first_byte + data, b""
            if len(data) < 2:
                self._first_byte = data
                return b""
        out: list[bytes] = []
        produced = 0
        while data and produced < limit:
            try:
                chunk = self._zlib.decompress(data, limit - produced)
            except zlib.error as exc:
                if self._raw_fallback and not self._started:
                    self._raw_fallback = False
                    self._zlib = zlib.decompressobj(_RAW_DEFLATE_WBITS)
                    continue
                raise DecodingError(f"{exc}") from None
            self._started = True
            out.append(chunk)
            produced += len(chunk)
            if self._zlib.eof:
                # Concatenated gzip members (RFC 1952) are one body: start the next member.
                data = self._zlib.unused_data
                self._zlib = zlib.decompressobj(self._wbits)
            else:
                data = self._zlib.unconsumed_tail
        self._held = data
        return b"".join(out)

    def flush(self) -> bytes:
        """What the decompressor still holds, at the end of the body."""
        try:
            return self._zlib.flush()
        except zlib.error as exc:
            raise DecodingError(f"{exc}") from None
