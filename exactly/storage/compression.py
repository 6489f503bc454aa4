"""Record-batch compression codecs (docs/formats.md §2.6).

A compressed batch keeps its 61-byte header in the clear; everything after
RecordCount is one stream in the codec named by attribute bits 0-2. The
streams are the ones the Java client writes and reads:

* gzip (1): one RFC 1952 member. Written with ``mtime=0``, so output is
  deterministic, at level 6, Kafka's ``compression.gzip.level`` default.
  Readers accept concatenated members, as ``GZIPInputStream`` does.
* snappy (2): the xerial ``SnappyOutputStream`` framing::

      stream  := magic version compatible_version chunk*
      magic   := 82 'S' 'N' 'A' 'P' 'P' 'Y' 00             (8 bytes)
      version, compatible_version := int32 BE, both 1
      chunk   := length:int32 BE, raw snappy block of that length

  Each chunk holds at most 32 KiB of input (xerial's default block size). Some
  clients (librdkafka) write one raw snappy block without framing, so readers
  accept both, telling them apart by the magic.
* lz4 (3): the LZ4 frame format with independent blocks. Kafka's
  ``Lz4BlockInputStream`` rejects linked blocks, so we never write them.
* zstd (4): one standard zstd frame.

snappy, lz4 and zstd come from the optional ``cramjam`` package
(``pip install exactly[compression]``), imported when first needed.

Every decompressor is bounded by ``max_size`` so that a small batch cannot
inflate without limit (a "zip bomb"): going over it raises
``InvalidRecordError``. Any other failure to decompress raises
``CorruptMessageError``.
"""

from __future__ import annotations

import gzip
import mmap
import struct
import zlib
from enum import IntEnum
from types import ModuleType

from exactly.storage.errors import (CorruptMessageError, InvalidRecordError,
                            UnsupportedCompressionTypeError)

DEFAULT_MAX_SIZE = 64 * 1024 * 1024
GZIP_LEVEL = 6

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_VERSION = 1
XERIAL_BLOCK_SIZE = 32 * 1024

XERIAL_HEADER = struct.Struct(
    ">"
    "8s"  # magic: XERIAL_MAGIC
    "i"   # version: 1
    "i"   # compatible version: 1 (the oldest reader version that can read the stream)
)

XERIAL_CHUNK_LENGTH = struct.Struct(
    ">"
    "i"   # length of the raw snappy block that follows
)

# cramjam's ``decompress_into`` reports a full output buffer with the message of
# Rust's io::ErrorKind::WriteZero; tests pin this for lz4 and zstd.
_OUTPUT_FULL = "failed to write whole buffer"


class Compression(IntEnum):
    """The codec ids of attribute bits 0-2."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


def _cramjam(codec: Compression) -> ModuleType:
    """The cramjam module, or UnsupportedCompressionTypeError if it is not installed."""
    try:
        import cramjam
    except ImportError:
        raise UnsupportedCompressionTypeError(
            f"{codec.name.lower()} compression needs the optional cramjam package: "
            "pip install exactly[compression]") from None
    return cramjam


def _too_large(codec: Compression, max_size: int) -> InvalidRecordError:
    return InvalidRecordError(
        f"{codec.name.lower()} data decompresses to more than {max_size} bytes")


def compress(codec: Compression | int, data: bytes | bytearray | memoryview) -> bytes:
    """``data`` compressed with ``codec``, in the stream format Kafka clients read."""
    codec = Compression(codec)
    if codec is Compression.NONE:
        return bytes(data)
    if codec is Compression.GZIP:
        return gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0)
    cramjam = _cramjam(codec)
    if codec is Compression.SNAPPY:
        view = memoryview(data)
        parts = [XERIAL_HEADER.pack(XERIAL_MAGIC, XERIAL_VERSION, XERIAL_VERSION)]
        for start in range(0, len(view), XERIAL_BLOCK_SIZE):
            block = bytes(cramjam.snappy.compress_raw(view[start:start + XERIAL_BLOCK_SIZE]))
            parts.append(XERIAL_CHUNK_LENGTH.pack(len(block)))
            parts.append(block)
        return b"".join(parts)
    if codec is Compression.LZ4:
        compressor = cramjam.lz4.Compressor(block_linked=False, content_checksum=False)
        compressor.compress(data)
        return bytes(compressor.finish())
    return bytes(cramjam.zstd.compress(data))


def decompress(codec: Compression | int, data: bytes | bytearray | memoryview,
               max_size: int = DEFAULT_MAX_SIZE) -> bytes:
    """``data`` decompressed with ``codec``, refusing output over ``max_size`` bytes.

    Raises CorruptMessageError if ``data`` is not a valid stream for the codec,
    InvalidRecordError if it inflates past ``max_size``, and
    UnsupportedCompressionTypeError if cramjam is needed but missing.
    """
    codec = Compression(codec)
    if codec is Compression.NONE:
        if len(data) > max_size:
            raise _too_large(codec, max_size)
        return bytes(data)
    if codec is Compression.GZIP:
        return _gunzip(data, max_size)
    cramjam = _cramjam(codec)
    try:
        if codec is Compression.SNAPPY:
            return _unsnappy(cramjam, data, max_size)
        return _decompress_bounded(codec, cramjam, data, max_size)
    except cramjam.DecompressionError as exc:
        raise CorruptMessageError(f"{codec.name.lower()} data does not decompress: {exc}") from exc


def _gunzip(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    """Concatenated gzip members, inflating at most ``max_size + 1`` bytes."""
    out = []
    total = 0
    rest = data
    try:
        while True:
            inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            chunk = inflater.decompress(rest, max_size + 1 - total)
            total += len(chunk)
            if total > max_size:
                raise _too_large(Compression.GZIP, max_size)
            if not inflater.eof:
                raise CorruptMessageError("gzip data ends in the middle of a member")
            out.append(chunk)
            rest = inflater.unused_data
            if not rest:
                return b"".join(out)
    except zlib.error as exc:
        raise CorruptMessageError(f"gzip data does not decompress: {exc}") from exc


def _unsnappy(cramjam: ModuleType, data: bytes | bytearray | memoryview,
              max_size: int) -> bytes:
    """Xerial-framed or raw snappy. Each raw block states its decompressed length
    up front (and the decoder enforces it), so sizes are checked before inflating."""
    view = memoryview(data)
    if bytes(view[:len(XERIAL_MAGIC)]) != XERIAL_MAGIC:
        blocks = [view]
    else:
        if len(view) < XERIAL_HEADER.size:
            raise CorruptMessageError("xerial snappy header is cut off")
        blocks = []
        pos = XERIAL_HEADER.size
        while pos < len(view):
            if len(view) - pos < XERIAL_CHUNK_LENGTH.size:
                raise CorruptMessageError(f"xerial snappy chunk length at {pos} is cut off")
            (length,) = XERIAL_CHUNK_LENGTH.unpack_from(view, pos)
            pos += XERIAL_CHUNK_LENGTH.size
            if length < 0 or length > len(view) - pos:
                raise CorruptMessageError(
                    f"xerial snappy chunk at {pos} claims {length} bytes, "
                    f"{len(view) - pos} remain")
            blocks.append(view[pos:pos + length])
            pos += length
    total = 0
    for block in blocks:
        total += cramjam.snappy.decompress_raw_len(block)
        if total > max_size:
            raise _too_large(Compression.SNAPPY, max_size)
    return b"".join(bytes(cramjam.snappy.decompress_raw(block)) for block in blocks)


def _decompress_bounded(codec: Compression, cramjam: ModuleType,
                        data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    """lz4/zstd decompressed into a buffer of ``max_size + 1`` bytes.

    cramjam's decoders stream into the buffer and stop when it is full, so they
    never hold more than the limit. The buffer is an anonymous mmap: the
    kernel backs only the pages actually written, so a 64 MiB limit costs
    nothing up front, unlike ``bytearray(max_size)``, which zero-fills every page.
    """
    module = cramjam.lz4 if codec is Compression.LZ4 else cramjam.zstd
    out = mmap.mmap(-1, max_size + 1)
    try:
        try:
            written = module.decompress_into(data, out)
        except cramjam.DecompressionError as exc:
            if _OUTPUT_FULL in str(exc):
                raise _too_large(codec, max_size) from None
            raise
        if written > max_size:
            raise _too_large(codec, max_size)
        return out[:written]
    finally:
        out.close()
