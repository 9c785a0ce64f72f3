"""The collector is paused while big structures are built, and always given back as it was."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from dropscan import heap


@pytest.fixture
def collector() -> Iterator[None]:
    was = gc.isenabled()
    yield
    gc.unfreeze()
    (gc.enable if was else gc.disable)()


@pytest.mark.usefixtures("collector")
def test_collection_is_paused_while_building_and_back_on_after() -> None:
    gc.enable()
    with heap.building():
        assert not gc.isenabled()
    assert gc.isenabled()


@pytest.mark.usefixtures("collector")
def test_an_error_while_building_gives_the_collector_back() -> None:
    gc.enable()
    with pytest.raises(KeyError), heap.building():
        raise KeyError("x")
    assert gc.isenabled()


@pytest.mark.usefixtures("collector")
def test_a_collector_the_caller_had_paused_stays_paused() -> None:
    gc.disable()
    with heap.building():
        pass
    assert not gc.isenabled()


@pytest.mark.usefixtures("collector")
def test_what_is_kept_is_frozen_out_of_later_collections() -> None:
    gc.enable()
    gc.unfreeze()
    with heap.building(keep=True):
        index = [{"token": i} for i in range(1000)]
    assert gc.get_freeze_count() >= len(index)


class Node:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


@pytest.mark.usefixtures("collector")
def test_the_survivors_of_a_full_collection_are_frozen_out_of_the_next() -> None:
    gc.enable()
    gc.unfreeze()
    with heap.frozen_survivors():
        kept = [Node() for _ in range(1000)]
        gc.collect()
        assert gc.get_freeze_count() >= 1000  # the next full collection walks none of them
        gc.collect(2)
        assert gc.get_freeze_count() >= 1000
    assert gc.get_freeze_count() == 0
    assert kept[0].me is kept[0]


@pytest.mark.usefixtures("collector")
def test_what_died_while_frozen_is_collected_once_the_context_ends() -> None:
    import weakref

    gc.enable()
    callbacks = list(gc.callbacks)
    with heap.frozen_survivors():
        node = Node()
        gone = weakref.ref(node)
        gc.collect()  # node survives: frozen
        del node
        gc.collect()
        assert gone() is not None  # a frozen cycle is not walked
    gc.collect()
    assert gone() is None
    assert gc.callbacks == callbacks
