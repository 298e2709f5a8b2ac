"""TensorBoard event files (``events.out.tfevents.*``) read without TensorBoard or protobuf.

A file is a sequence of TFRecords: ``uint64 length`` (little-endian), ``uint32`` masked CRC-32C
of the length, ``length`` bytes of data, ``uint32`` masked CRC-32C of the data. Each record's data
is a serialized ``tensorboard.Event`` (tensorboard/compat/proto/event.proto): ``wall_time = 1``
(double), ``step = 2`` (int64), ``summary = 5`` (``Summary``: ``repeated Value value = 1``). A
``Summary.Value`` (summary.proto) has ``tag = 1`` (string), ``simple_value = 2`` (float: what
``SummaryWriter.add_scalar`` writes by default) and ``tensor = 8`` (``TensorProto``, tensor.proto:
``dtype = 1``, ``tensor_content = 4``, ``float_val = 5``, ``double_val = 6``, ``int_val = 7``,
``int64_val = 10``, ``half_val = 13``: what TensorFlow 2, ``add_scalar(new_style=True)`` and
Lightning's ``TensorBoardLogger`` write). Only scalars are kept: a value of one number.

The length's CRC is checked (a record cut short or a file that is not TFRecords stops the file);
the data's is not (scalar records are small, but a graph or an image can be megabytes of pure
Python CRC). :class:`TfEventsFile` reads what was appended since the last call; a record still
being written waits for the next call. Pure and stdlib only.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Scalars", "TfEventsFile", "decode_event", "masked_crc32c", "split_records"]

#: The DataType enum values of a scalar tensor fttui reads (types.proto)
DT_FLOAT, DT_DOUBLE, DT_INT32, DT_INT64, DT_BFLOAT16, DT_HALF = 1, 2, 3, 9, 14, 19
#: A record longer than this is not a scalar summary: skipped unread
MAX_RECORD = 64 * 1024 * 1024
_HEADER = 12  # length (8) + its CRC (4)


def _crc_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc_table()


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C (Castagnoli) of ``data``."""
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def split_records(buf: bytes, pos: int = 0) -> tuple[list[bytes], int, bool]:
    """The complete records of ``buf`` from ``pos``: ``(records, next_pos, ok)``; ``ok`` is False
    where a length's CRC is wrong (not TFRecords, or corrupt: nothing after it is read)."""
    out: list[bytes] = []
    while len(buf) - pos >= _HEADER:
        length = struct.unpack_from("<Q", buf, pos)[0]
        if struct.unpack_from("<I", buf, pos + 8)[0] != masked_crc32c(buf[pos : pos + 8]):
            return out, pos, False
        end = pos + _HEADER + length + 4
        if len(buf) < end:
            break  # still being written
        if length <= MAX_RECORD:
            out.append(buf[pos + _HEADER : pos + _HEADER + length])
        pos = end
    return out, pos, True


# ---------------------------------------------------------------------------- protobuf wire format
def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes):
    """``(number, wire_type, value)`` of each field of one message; ``value`` is an int (varint),
    bytes (length-delimited, or the 8 / 4 raw bytes of a fixed-size field)."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            yield number, wire, value
        elif wire == 1:
            yield number, wire, buf[pos : pos + 8]
            pos += 8
        elif wire == 2:
            n, pos = _varint(buf, pos)
            if pos + n > len(buf):
                raise ValueError("truncated field")
            yield number, wire, buf[pos : pos + n]
            pos += n
        elif wire == 5:
            yield number, wire, buf[pos : pos + 4]
            pos += 4
        else:
            raise ValueError(f"wire type {wire}")
    if pos != len(buf):
        raise ValueError("truncated message")


def _half(bits: int) -> float:
    return struct.unpack("<e", struct.pack("<H", bits & 0xFFFF))[0]


def _tensor_scalar(buf: bytes) -> float | None:
    """The one number of a scalar ``TensorProto``; None for anything else."""
    dtype, content = 0, b""
    vals: list[float] = []
    for number, wire, value in _fields(buf):
        if number == 1 and wire == 0:
            dtype = int(value)
        elif number == 4 and wire == 2:
            content = bytes(value)
        elif number in (5, 6) and wire in (1, 2, 5):  # float_val / double_val, packed or not
            code, size = ("<f", 4) if number == 5 else ("<d", 8)
            raw = bytes(value)
            vals += [struct.unpack_from(code, raw, i)[0] for i in range(0, len(raw) - size + 1, size)]
        elif number in (7, 10, 13):  # int_val, int64_val, half_val: packed varints (or one)
            ints = [int(value)] if wire == 0 else _packed_varints(bytes(value)) if wire == 2 else []
            if number == 13:
                vals += [_half(i) for i in ints]
            else:
                vals += [float(i - (1 << 64) if i >= 1 << 63 else i) for i in ints]
    if content:
        codes = {DT_FLOAT: "<f", DT_DOUBLE: "<d", DT_INT32: "<i", DT_INT64: "<q", DT_HALF: "<e"}
        if dtype == DT_BFLOAT16 and len(content) == 2:
            return float(struct.unpack("<f", b"\x00\x00" + content)[0])
        fmt = codes.get(dtype)
        if fmt is None or len(content) != struct.calcsize(fmt):
            return None
        return float(struct.unpack(fmt, content)[0])
    return vals[0] if len(vals) == 1 else None


def _packed_varints(buf: bytes) -> list[int]:
    out, pos = [], 0
    while pos < len(buf):
        v, pos = _varint(buf, pos)
        out.append(v)
    return out


@dataclass(frozen=True)
class Scalars:
    """The scalar values of one event: ``{tag: value}`` at ``step`` and ``wall_time``."""

    wall_time: float | None
    step: int
    values: dict[str, float] = field(default_factory=dict)


def _summary(buf: bytes) -> dict[str, float]:
    out: dict[str, float] = {}
    for number, wire, value in _fields(buf):
        if number != 1 or wire != 2:
            continue
        tag, scalar = None, None
        for n, w, v in _fields(bytes(value)):
            if n == 1 and w == 2:
                tag = bytes(v).decode("utf-8", "replace")
            elif n == 2 and w == 5:
                scalar = float(struct.unpack("<f", bytes(v))[0])
            elif n == 8 and w == 2:
                scalar = _tensor_scalar(bytes(v))
        if tag is not None and scalar is not None:
            out[tag] = scalar
    return out


def decode_event(data: bytes) -> Scalars | None:
    """The scalars of one serialized ``Event``; None when it holds none (the file's version
    record, graphs, histograms, images) or is not an ``Event``."""
    wall_time: float | None = None
    step: int | None = None
    values: dict[str, float] = {}
    try:
        for number, wire, value in _fields(data):
            if number == 1 and wire == 1:
                wall_time = float(struct.unpack("<d", bytes(value))[0])
            elif number == 2 and wire == 0:
                step = int(value) - (1 << 64) if int(value) >= 1 << 63 else int(value)
            elif number == 5 and wire == 2:
                values.update(_summary(bytes(value)))
    except (ValueError, struct.error):
        return None
    return Scalars(wall_time, step or 0, values) if values else None  # proto3: a step 0 is left out


class TfEventsFile:
    """One event file, read as it grows: :meth:`read` returns the scalars appended since the last
    call. A file that is not TFRecords (or is corrupt) is read no further."""

    #: bytes read per call at most (a file of large histograms or images is read over several calls)
    CHUNK = 4 * 1024 * 1024

    def __init__(self, path: Path) -> None:
        self.path = path
        self.pos = 0
        self.broken = False

    def read(self) -> list[Scalars]:
        if self.broken:
            return []
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                buf = f.read(self.CHUNK)
                if len(buf) >= _HEADER:  # a record larger than the chunk: read it whole, or skip it
                    length = struct.unpack_from("<Q", buf, 0)[0]
                    if _HEADER + length + 4 > len(buf) and length <= MAX_RECORD:
                        buf += f.read(_HEADER + length + 4 - len(buf))
        except OSError:
            return []
        records, used, ok = split_records(buf)
        if not ok:
            self.broken = True
        if not records and used == 0 and len(buf) >= _HEADER and ok:
            length = struct.unpack_from("<Q", buf, 0)[0]
            if length > MAX_RECORD:  # skip a record too large to be a scalar without reading it
                used = _HEADER + length + 4
        self.pos += used
        out = []
        for rec in records:
            s = decode_event(rec)
            if s is not None:
                out.append(s)
        return out
