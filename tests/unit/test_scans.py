"""The scan item's accounting of parts and chunks: exactly one update sees the scan complete, however
the part and chunk updates interleave or are redelivered."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from dropscan.keys import ROOT, child_part, chunk_tag, next_segment, split_tag, walk_order
from dropscan.models import Upload
from dropscan.store.scans import ScanStore

from helpers.tables import create_table

UPLOAD = Upload("drops", "drops/acme/x.tar", "e1", None, "acme", {})


@pytest.fixture
def store() -> Iterator[ScanStore]:
    with mock_aws():
        create_table(boto3.client("dynamodb", region_name="us-east-1"), "ScansTable", "scans")
        yield ScanStore("scans", region="us-east-1")


def test_part_ids_and_chunk_tags_are_deterministic_and_distinct() -> None:
    assert child_part(ROOT, 3) == "0.3"
    assert child_part("0.3", 0) == "0.3.0"
    assert next_segment(ROOT) == "0+1"
    assert next_segment("0+1") == "0+2"
    assert next_segment("0.3+9") == "0.3+10"
    tags = {chunk_tag(p, s) for p in (ROOT, "0.3", "0+1", "0.3+1") for s in (0, 1, 12)}
    assert len(tags) == 12
    assert chunk_tag(ROOT, 7) == "7"  # the earlier layout's ids
    assert {split_tag(t) for t in tags} == {(p, s) for p in (ROOT, "0.3", "0+1", "0.3+1") for s in (0, 1, 12)}


def test_a_single_part_completes_on_its_close_or_its_last_chunk(store: ScanStore) -> None:
    store.begin("s1", UPLOAD)
    assert not store.chunk_done("s1", chunk_tag(ROOT, 0))
    assert not store.chunk_done("s1", chunk_tag(ROOT, 1))
    # a part closing after all its chunks were done is the one that completes the scan
    assert store.close_part("s1", ROOT, 2, size=10, sha256="ab", status="scanning")
    store.begin("s2", UPLOAD)
    assert not store.close_part("s2", ROOT, 2, size=10, sha256="ab", status="scanning")
    assert not store.chunk_done("s2", chunk_tag(ROOT, 0))
    assert store.chunk_done("s2", chunk_tag(ROOT, 1))


def test_a_fanned_out_part_keeps_the_scan_open_until_it_closes(store: ScanStore) -> None:
    store.begin("s", UPLOAD)
    assert store.open_part("s", "0.3")
    assert not store.close_part("s", ROOT, 1, size=10, sha256="ab", status="scanning")
    assert not store.chunk_done("s", chunk_tag(ROOT, 0))  # all counted chunks done; 0.3 open
    scan = store.get("s")
    assert scan is not None and scan.part_closed(ROOT) and not scan.is_complete()
    assert not store.chunk_done("s", chunk_tag("0.3", 0))  # the child's chunk 0 is not the root's
    assert store.close_part("s", "0.3", 1, unpacked=5, members=2)
    scan = store.get("s")
    assert scan is not None
    assert (int(scan.chunks_total or 0), int(scan.chunks_done)) == (2, 2)
    assert (int(scan.unpacked_bytes or 0), int(scan.members or 0)) == (5, 2)


def test_a_redelivered_open_and_close_count_once(store: ScanStore) -> None:
    store.begin("s", UPLOAD)
    assert store.open_part("s", "0.1")
    assert not store.open_part("s", "0.1")  # the parent's redelivery opens it again: nothing changes
    assert not store.close_part("s", ROOT, 0, size=1, sha256="ab", status="scanning")
    assert not store.close_part("s", ROOT, 0, size=1, sha256="ab", status="scanning")
    assert not store.chunk_done("s", chunk_tag("0.1", 0))
    # the child closes after its one chunk was done: complete; its redelivery reports it again (the first
    # run may have died before sending the finalize message) and counts nothing
    assert store.close_part("s", "0.1", 1)
    assert store.close_part("s", "0.1", 1)
    scan = store.get("s")
    assert scan is not None and int(scan.chunks_total or 0) == 1
    assert store.claim_finalize("s", "m-1")
    assert not store.close_part("s", "0.1", 1)  # finalised: no more triggers


def test_a_part_that_was_never_opened_cannot_close(store: ScanStore) -> None:
    store.begin("s", UPLOAD)
    assert store.close_part("s", ROOT, 0, size=1, sha256="ab", status="scanning")
    assert store.claim_finalize("s", "m-1")
    assert not store.close_part("s", "0.9", 3)
    scan = store.get("s")
    assert scan is not None and "0.9" not in (scan.parts_closed or set()) and int(scan.chunks_total or 0) == 0


def test_the_earlier_layout_is_still_read(store: ScanStore) -> None:
    """A scan item begun before parts existed: no parts_open; its unpack set chunks_total once."""
    store.begin("old", UPLOAD)
    store.model("old").update(actions=[store.model.parts_open.remove()])
    scan = store.get("old")
    assert scan is not None and not scan.part_closed(ROOT)
    assert not store.chunk_done("old", 0)
    assert store.set_total("old", 1, size=1, sha256="ab", reason=None, status="scanning")
    scan = store.get("old")
    assert scan is not None and scan.part_closed(ROOT) and scan.is_complete()


Event = tuple[str, Any]


def _scenario() -> tuple[list[Event], dict[str, list[Event]]]:
    """The root part fans out 0.1 and 0.2; 0.2 is split into 0.2+1; each part sends chunks.

    Returns the events and, for each, the events that must come before it (a part opens its children
    before it closes; a chunk is done after its part sent it, which is after the part was opened).
    """
    chunks = {ROOT: 2, "0.1": 3, "0.2": 1, "0.2+1": 2}
    parents = {"0.1": ROOT, "0.2": ROOT, "0.2+1": "0.2"}
    events: list[Event] = []
    after: dict[str, list[Event]] = {}
    for part, n in chunks.items():
        close = ("close", (part, n))
        events.append(close)
        if part in parents:
            opening = ("open", part)
            events.append(opening)
            after[repr(close)] = [opening]
            after.setdefault(repr(("close", (parents[part], chunks[parents[part]]))), []).append(opening)
        for seq in range(n):
            done = ("chunk", chunk_tag(part, seq))
            events.append(done)
            after[repr(done)] = [("open", part)] if part in parents else []
    return events, after


@pytest.mark.parametrize("seed", range(12))
def test_exactly_one_update_sees_the_scan_complete_whatever_the_order(store: ScanStore, seed: int) -> None:
    events, after = _scenario()
    rng = random.Random(seed)
    order: list[Event] = []
    waiting = list(events)
    while waiting:
        ready = [e for e in waiting if all(b in order for b in after.get(repr(e), []))]
        e = rng.choice(ready)
        order.append(e)
        waiting.remove(e)
        if rng.random() < 0.3:
            order.append(e)  # redelivered at once
    store.begin("s", UPLOAD)
    seen = []
    for kind, arg in order:
        if kind == "open":
            store.open_part("s", arg)
            continue
        if store.chunk_done("s", arg) if kind == "chunk" else store.close_part("s", *arg):
            seen.append((kind, arg))
    # one update saw it; any further True is a redelivery of that same update (finalize's claim de-duplicates)
    assert len({repr(s) for s in seen}) == 1, seen
    scan = store.get("s")
    assert scan is not None and (int(scan.chunks_total or 0), int(scan.chunks_done)) == (8, 8)
    assert store.claim_finalize("s", "m-1")
    kind, arg = seen[0]
    assert not (store.chunk_done("s", arg) if kind == "chunk" else store.close_part("s", *arg))


def test_chunks_are_read_back_in_the_order_one_walk_meets_them() -> None:
    tags = ["0+10/0", "0+2/1", "1", "0+2/0", "0", "0+1/0", "10", "2"]
    assert sorted(tags, key=walk_order) == ["0", "1", "2", "10", "0+1/0", "0+2/0", "0+2/1", "0+10/0"]


@pytest.mark.parametrize("seed", range(5))
def test_triage_parts_count_once_in_any_order_and_one_assembler_claims(store: ScanStore, seed: int) -> None:
    """Each triage part counts itself once, redelivered or not; only the set's completion answers True
    (and a repeat of a counted part after it, whose earlier run may have died before handing on)."""
    store.begin("s", UPLOAD)
    store.set_triage_parts("s", 5)
    deliveries = [0, 1, 2, 3, 4, *random.Random(seed).choices(range(5), k=4)]
    random.Random(seed).shuffle(deliveries)
    answers = []
    for n in deliveries:
        answers.append(store.triage_part_done("s", n))
    first_complete = answers.index(True)
    assert len(set(deliveries[: first_complete + 1])) == 5 and len(set(deliveries[:first_complete])) == 4
    assert all(answers[first_complete:])  # every later delivery is a redelivery of a counted part
    scan = store.get("s")
    assert scan is not None and scan.triage_parts == 5 and scan.triage_done == {"0", "1", "2", "3", "4"}

    assert store.claim_assembly("s", "m-1")
    assert store.claim_assembly("s", "m-1")  # the winning message, redelivered
    assert not store.claim_assembly("s", "m-2")


def test_open_parts_report_how_far_they_walked_and_a_close_takes_over(store: ScanStore) -> None:
    # Given a scan whose root part fanned a nested archive out to a part of its own
    store.begin("s", UPLOAD)
    store.open_part("s", "0.3")
    # When both report how far they have got, the nested part twice
    assert store.report_unpacking("s", ROOT, members=100, unpacked=5_000)
    assert store.report_unpacking("s", "0.3", members=10, unpacked=700)
    assert store.report_unpacking("s", "0.3", members=20, unpacked=900)
    scan = store.get("s")
    # Then a client sees both walks, each part's latest report once
    assert scan is not None and scan.unpacked_so_far() == (120, 5_900)
    # and once the root closes, its close's counts replace its report; a late report is refused
    store.close_part("s", ROOT, 1, unpacked=6_000, members=130, size=10, sha256="ab", status="scanning")
    assert not store.report_unpacking("s", ROOT, members=1, unpacked=1)
    scan = store.get("s")
    assert scan is not None and scan.unpacked_so_far() == (150, 6_900)
    store.close_part("s", "0.3", 1, unpacked=1_000, members=25)
    scan = store.get("s")
    assert scan is not None and scan.unpacked_so_far() == (155, 7_000)


def test_a_scan_begun_before_progress_reports_refuses_them(store: ScanStore) -> None:
    store.begin("s", UPLOAD)
    store.model("s").update(actions=[store.model.unpacking.remove()])  # as an earlier layout's item
    assert not store.report_unpacking("s", ROOT, members=1, unpacked=1)
