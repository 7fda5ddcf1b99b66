"""Storage: byte values with a 10 MiB limit, upserts, and key-ordered listings without values."""

from __future__ import annotations

import pytest

from mcphost.errors import InvalidArgumentError, PayloadTooLargeError
from mcphost.stores import Stores
from mcphost.stores.storage import MAX_VALUE_BYTES

OWNER = ("mcphost/echo",)


async def test_set_get_delete_bytes(stores: Stores) -> None:
    item = await stores.storage.set("plugin", OWNER, "blob.bin", b"\x00\xff" * 10)
    assert item.size == 20
    value = await stores.storage.get("plugin", OWNER, "blob.bin")
    assert value is not None
    assert value.value == b"\x00\xff" * 10
    assert value.size == 20
    await stores.storage.set("plugin", OWNER, "blob.bin", b"new")
    value = await stores.storage.get("plugin", OWNER, "blob.bin")
    assert value is not None
    assert value.value == b"new"
    assert await stores.storage.delete("plugin", OWNER, "blob.bin")
    assert not await stores.storage.delete("plugin", OWNER, "blob.bin")
    assert await stores.storage.get("plugin", OWNER, "blob.bin") is None


async def test_ten_mib_fits_and_one_byte_more_is_refused_leaving_the_old_value(stores: Stores) -> None:
    await stores.storage.set("workspace", OWNER, "k", b"old")
    await stores.storage.set("workspace", OWNER, "max", b"x" * MAX_VALUE_BYTES)
    stored = await stores.storage.get("workspace", OWNER, "max")
    assert stored is not None
    assert stored.size == MAX_VALUE_BYTES
    with pytest.raises(PayloadTooLargeError, match="10485760"):
        await stores.storage.set("workspace", OWNER, "k", b"x" * (MAX_VALUE_BYTES + 1))
    kept = await stores.storage.get("workspace", OWNER, "k")
    assert kept is not None
    assert kept.value == b"old"


async def test_bad_area_or_key_is_refused(stores: Stores) -> None:
    with pytest.raises(InvalidArgumentError, match="Unknown storage area 'home'"):
        await stores.storage.set("home", OWNER, "k", b"v")
    with pytest.raises(InvalidArgumentError, match="Invalid key"):
        await stores.storage.set("plugin", OWNER, "no spaces", b"v")
    assert (await stores.storage.list("plugin", OWNER)).items == []


async def test_list_pages_keys_and_sizes_without_values(stores: Stores) -> None:
    for key in ["c", "a", "b.1", "b.2", "d"]:
        await stores.storage.set("binding", OWNER, key, key.encode() * 3)
    await stores.storage.set("binding", ("other",), "a", b"x")
    first = await stores.storage.list("binding", OWNER, limit=2)
    assert [(i.key, i.size) for i in first.items] == [("a", 3), ("b.1", 9)]
    assert first.has_more
    assert first.next_cursor is not None
    rest = await stores.storage.list("binding", OWNER, limit=10, cursor=first.next_cursor)
    assert [i.key for i in rest.items] == ["b.2", "c", "d"]
    assert not rest.has_more
    prefixed = await stores.storage.list("binding", OWNER, prefix="b.")
    assert [i.key for i in prefixed.items] == ["b.1", "b.2"]
    assert not hasattr(prefixed.items[0], "value")
