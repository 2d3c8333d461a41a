"""UUIDs made in fewer steps (the ids of new aggregates and claims), and their hex text.

`uuid.UUID.__init__` is Python code that checks which of its five forms it was given,
range-checks the integer and sets the version bits; `uuid.uuid4()` runs it after reading
16 random bytes. On a create, making the user's id and the claim's id that way cost about
20,000 instructions, a thirtieth of the whole command. These make the same UUIDs (tests
hold them equal to the standard library's, version and variant included), setting the two
slots `UUID.__init__` sets at its end.
"""

from __future__ import annotations

import os
from uuid import UUID, SafeUUID

# The version (4) and RFC 4122 variant bits of a random UUID, as `UUID(version=4)` sets.
_VERSION_KEEP = ~((0xF000 << 64) | (0xC000 << 48))
_VERSION_4 = (4 << 76) | (0x8000 << 48)

_new = object.__new__
_set = object.__setattr__
_UNKNOWN = SafeUUID.unknown


def uuid_hex(value: UUID) -> str:
    """`value.hex` (32 lowercase hex digits: how a UUID is written in a stored event's
    JSON, and bound where the database has no UUID type), remembered by the UUID's int.

    A create writes seven, of three UUIDs: the team's (the same for every command of a
    team), the user's (three times) and the claim's. `UUID.hex` is a Python property
    formatting a 128-bit int (`'%032x' % self.int`); together, about 2,500 instructions
    (callgrind: 5,400 fewer per create with this memo). On a miss the text is the int's
    16 bytes as hex, the same digits in one C step. The dict is emptied when full
    (`_HEX_KEPT`), which bounds it and keeps the ids in current use."""
    number = value.int
    text = _HEX.get(number)
    if text is None:
        if len(_HEX) >= _HEX_KEPT:
            _HEX.clear()
        text = _HEX[number] = number.to_bytes(16).hex()
    return text


_HEX: dict[int, str] = {}
_HEX_KEPT = 1024


def uuid_from_int(value: int) -> UUID:
    """`UUID(int=value)` for a value known to fit in 128 bits (a masked digest)."""
    made = _new(UUID)
    _set(made, "int", value)
    _set(made, "is_safe", _UNKNOWN)
    return made


def new_uuid() -> UUID:
    """A random (version 4) UUID, as `uuid.uuid4()` makes one from 16 bytes of
    `os.urandom`; the bytes are read 4,096 at a time (`_POOL_BYTES`). A read is a system
    call (getrandom), about 5 µs on a command's cold caches, for 16 bytes. The numbers
    not yet used stay in this process: a forked child drops them (`register_at_fork`),
    so parent and child never hand out the same one; `list.pop` hands each number out
    once, whichever thread asks."""
    try:
        number = _random_numbers.pop()
    except IndexError:
        number = _refill()
    made = _new(UUID)
    _set(made, "int", number & _VERSION_KEEP | _VERSION_4)
    _set(made, "is_safe", _UNKNOWN)
    return made


def _refill() -> int:
    """One number for the caller, and the rest of a read of `os.urandom` for later."""
    raw = os.urandom(_POOL_BYTES)
    numbers = [int.from_bytes(raw[i : i + 16]) for i in range(0, _POOL_BYTES, 16)]
    number = numbers.pop()
    _random_numbers.extend(numbers)
    return number


_POOL_BYTES = 4096
# 128-bit numbers from os.urandom, each handed out once (`new_uuid`).
_random_numbers: list[int] = []
os.register_at_fork(after_in_child=_random_numbers.clear)
