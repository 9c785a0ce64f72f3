"""How a walk is cut into hash chunks, without a queue: each digest asked for once, every file carried
once in order, and no more BatchGetItem calls than the scan's unique digests need."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from dropscan.chunks import Chunk, Chunker, compact, lookup_keys
from dropscan.models import FileRecord


def _d(n: int) -> str:
    return hashlib.sha256(str(n).encode()).hexdigest()


@st.composite
def records(draw: st.DrawFn) -> FileRecord:
    sha = draw(st.integers(0, 300))
    # most files need no normalisation; some share normal forms with other files
    kw = draw(st.sampled_from([sha, sha, 1000 + sha % 7]))
    ws = draw(st.sampled_from([sha, sha, kw, 2000 + sha % 5]))
    size = draw(st.sampled_from([0, 1, 4096]))
    return FileRecord(f"f{draw(st.integers(0, 9))}", size, _d(sha), _d(kw), _d(ws), "text")


def cut(chunker: Chunker, recs: list[FileRecord]) -> list[Chunk]:
    chunks = [c for r in recs for c in chunker.add(r)]
    return chunks + chunker.flush()


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@given(recs=st.lists(records(), max_size=400), size=st.integers(1, 60), keys=st.sampled_from([3, 7, 200]))
def test_a_walk_cut_into_chunks_asks_each_digest_once_and_carries_every_file(
    recs: list[FileRecord], size: int, keys: int
) -> None:
    chunker = Chunker(size, keys)
    chunks = cut(chunker, recs)
    asked = [k for c in chunks for k in c.keys]
    # Then every digest of a non-empty file is asked for, once
    assert sorted(asked) == sorted({k for r in recs for k in lookup_keys(r)})
    # and every file is carried, once, in the walk's order
    assert [r for c in chunks for r in c.records] == [compact(r) for r in recs]
    assert chunker.files == len(recs)
    # and each chunk stays within its bounds; all but the last ask for whole BatchGets
    assert all(len(c.keys) <= keys and len(c.records) <= size for c in chunks)
    assert all(len(c.keys) % chunker.unit == 0 for c in chunks[:-1])
    assert sum(ceil_div(len(c.keys), chunker.unit) for c in chunks) == ceil_div(len(asked), chunker.unit)


def test_a_record_leaves_out_normal_forms_equal_to_its_digest_and_reads_back_whole() -> None:
    plain = FileRecord("a.bin", 3, _d(1), _d(1), _d(1), "binary")
    text = FileRecord("a.c", 3, _d(2), _d(3), _d(2), "text")
    assert "kw" not in compact(plain) and "ws" not in compact(plain)
    assert compact(text)["kw"] == _d(3) and "ws" not in compact(text)
    assert [FileRecord.from_json(compact(r)) for r in (plain, text)] == [plain, text]
    # an empty file asks for nothing; a normalised one for each of its distinct digests
    assert lookup_keys(FileRecord("e", 0, _d(4), _d(4), _d(4), "empty")) == ()
    assert lookup_keys(text) == (_d(2), _d(3))
