"""ingest-git on small repositories built with git: tags as releases, history with provenance,
incremental runs, a partial clone's missing blob."""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from gitrepos import FIX, LICENCE, build_upstream_repo, commit, git, long_history, sha
from moto import mock_aws

from dropscan.archive.digest import digest_bytes
from dropscan.audit.hunks import MAX_PUBLISHED
from dropscan.forked import usable_cpus
from dropscan.git import diff_worker, history
from dropscan.git.commit_diffs import BlobWork, CommitChanges
from dropscan.git.diff_worker import DiffSplit, Trees, commit_changes
from dropscan.git.repo import GitRepo, version_of
from dropscan.models import VersionRange
from dropscan.stages.ingest_git import DiffWorker, GitIngestOptions, ingest_git, start_diff_worker
from dropscan.store.content import SHARDS, ContentStore, PackWriter, unpack
from dropscan.store.releases import Releases
from dropscan.store.upstream import UpstreamDB


@pytest.fixture
def upstream_repo(tmp_path: Path) -> Path:
    return build_upstream_repo(tmp_path)


@pytest.fixture
def aws() -> Iterator[tuple[UpstreamDB, Releases]]:
    with mock_aws():
        dynamodb = boto3.client("dynamodb", region_name="us-east-1")
        dynamodb.create_table(
            TableName="upstream",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="upstream-bucket")
        yield UpstreamDB(dynamodb, "upstream"), Releases(s3, "upstream-bucket")


def ingest(
    repo: Path,
    package: str,
    aws: tuple[UpstreamDB, Releases],
    options: GitIngestOptions,
    worker: DiffWorker | None = None,
) -> dict[str, Any]:
    """The stage on the repository, with a content store in the releases' bucket (as Services makes one)."""
    db, releases = aws
    content = ContentStore(releases.s3, releases.bucket)
    return ingest_git(GitRepo(str(repo / ".git")), package, db, releases, content, options, worker=worker)


def run(repo: Path, aws: tuple[UpstreamDB, Releases], **options: Any) -> dict[str, Any]:
    return ingest(repo, "foo", aws, GitIngestOptions(**options))


@pytest.mark.parametrize(
    ("tag", "version"),
    [
        ("1_35_0", "1.35.0"),
        ("v6.1.176", "6.1.176"),
        ("v2023.01", "2023.01"),
        ("busybox-1.2", "1.2"),
        ("latest", None),
    ],
)
def test_versions_from_tag_names(tag: str, version: str | None) -> None:
    assert version_of(tag) == version


def test_a_regex_names_the_version() -> None:
    assert version_of("release/2021.01-rc1", re.compile(r"release/(\S+)")) == "2021.01-rc1"
    assert version_of("other", re.compile(r"release/(\S+)")) is None


def test_tags_become_releases_and_each_blob_is_read_once(upstream_repo: Path, aws: Any) -> None:
    db, releases = aws
    report = run(upstream_repo, aws)
    # Then both tags are releases, with their path lists (the symlink as an archive records one)
    assert db.packages()["foo"].versions == ("1.0", "1.1")
    assert releases.load("foo", "1.0").files == {
        "LICENSE": sha(LICENCE),
        "main.c": sha(b"int main(void) { return 0; }\n"),
    }
    v11 = releases.load("foo", "1.1").files
    assert set(v11) == {"LICENSE", "main.c", "util/new.c", "link.c"}
    assert v11["link.c"] == sha(b"")
    # and the licence, in both tags, is one blob read once, ranging over both releases
    assert report["blobs"]["read"] == 3  # licence, main.c, util/new.c: no other content in the tags
    found = db.lookup([sha(LICENCE), sha(FIX)])
    assert found[sha(LICENCE)].packages == {"foo": VersionRange("1.0", "1.1")}
    assert sha(FIX) not in found  # only on a branch: not without --history
    assert report["blobs"]["missing"] == 0


def test_history_names_the_commit_of_an_unreleased_fix(upstream_repo: Path, aws: Any) -> None:
    db, _ = aws
    report = run(upstream_repo, aws, history=True)
    fix = db.lookup([sha(FIX)])[sha(FIX)]
    # Then the fix is upstream content of foo, in no release, with the commit it came from
    assert fix.packages == {} and fix.names == {"foo"} and "raw" in fix.forms
    prov = fix.history["foo"]
    assert prov["c"] == (upstream_repo / "fix-commit").read_text()
    assert prov["s"] == "Fix the return code" and prov["t"] == "2003-03-03T00:00:00Z"
    assert prov["p"] == ["main.c"] and "r" not in prov
    # and a released file says its first commit and its first release tag, and the paths it had
    lic = db.lookup([sha(LICENCE)])[sha(LICENCE)].history["foo"]
    assert lic["s"] == "Initial import" and lic["r"] == "1_0"
    old = db.lookup([sha(b"int old;\n")])[sha(b"int old;\n")].history["foo"]
    assert old["p"] == ["util/new.c", "util/old.c"] and old["r"] == "v1.1"
    # and every blob of the history was read once: the three of the tags, the fix and the first main.c
    assert report["blobs"]["read"] == 4 and report["commits"] == 5


def _branchy_repo(tmp_path: Path) -> Path:
    """Two roots, a folder renamed, a file copied, a branch merged with a file the merge itself adds,
    a change undone, a symbolic link: each content brought first by one commit only."""
    repo = tmp_path / "branchy"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "master")
    commit(repo, {"a/x.c": b"int x;\n", "a/y.c": b"int y;\n", "LICENSE": LICENCE}, "Import", "2001-01-01")
    git(repo, "tag", "1_0")
    git(repo, "mv", "a", "b")
    git(repo, "commit", "-q", "-m", "Rename a to b", date="2001-02-01T00:00:00Z")
    commit(repo, {"c/x.c": b"int x;\n"}, "Copy x", "2001-03-01")
    git(repo, "checkout", "-q", "-b", "side")
    commit(repo, {"b/y.c": b"int y = 2;\n"}, "Side: y", "2001-04-01")
    git(repo, "checkout", "-q", "master")
    commit(repo, {"b/x.c": b"int x = 2;\n"}, "Master: x", "2001-05-01")
    git(repo, "merge", "-q", "--no-ff", "--no-commit", "side")
    (repo / "evil.c").write_bytes(b"int evil;\n")
    git(repo, "add", "evil.c")
    git(repo, "commit", "-q", "-m", "Merge side, with evil.c", date="2001-06-01T00:00:00Z")
    git(repo, "checkout", "-q", "--orphan", "other")
    git(repo, "rm", "-q", "-rf", ".")
    commit(repo, {"o.c": b"int o;\n"}, "Another root", "2001-07-01")
    git(repo, "checkout", "-q", "master")
    git(repo, "merge", "-q", "--no-ff", "--allow-unrelated-histories", "-m", "Merge other", "other")
    os.symlink("b/x.c", repo / "link.c")
    git(repo, "add", "link.c")
    commit(repo, {"b/x.c": b"int x;\n"}, "Undo x", "2001-08-01")
    git(repo, "tag", "1_1")
    return repo


def test_each_blob_is_credited_to_the_first_commit_whose_tree_holds_it(tmp_path: Path, aws: Any) -> None:
    # Given a history of branches, merges, two roots, renames and copies
    repo = _branchy_repo(tmp_path)
    # When it is ingested with its history (each commit's tree read as a diff against its first parent)
    db, _ = aws
    run(repo, aws, history=True)
    # Then each content's provenance is the first commit, parents first, whose whole tree holds it
    # (read here with git ls-tree, tree by tree), with every path it ever had
    first: dict[str, str] = {}
    paths: dict[str, set[str]] = {}
    contents: dict[str, bytes] = {}
    for c in git(repo, "rev-list", "--topo-order", "--reverse", "--all").split():
        for line in git(repo, "ls-tree", "-r", c).splitlines():
            mode, _, blob, path = line.split(maxsplit=3)
            if mode == "120000":
                continue  # a symbolic link: no content of its own
            first.setdefault(blob, c)
            paths.setdefault(blob, set()).add(path)
            contents[blob] = git(repo, "cat-file", "blob", blob).encode() + b"\n"
    assert len(first) == 7  # x and y in two states each, the licence, evil.c and o.c
    found = db.lookup([sha(data) for data in contents.values()])
    for blob, data in contents.items():
        prov = found[sha(data)].history["foo"]
        assert (prov["c"], prov["p"]) == (first[blob], sorted(paths[blob])), data
    evil = found[sha(b"int evil;\n")].history["foo"]
    assert evil["s"] == "Merge side, with evil.c"  # a merge's own content is the merge's


def test_a_second_run_with_nothing_new_reads_and_writes_nothing(upstream_repo: Path, aws: Any) -> None:
    db, _ = aws
    run(upstream_repo, aws, history=True)
    written = db.stats.items_written
    again = run(upstream_repo, aws, history=True)
    assert again["tags"]["new"] == 0 and again["commits"] == 0
    assert again["blobs"]["read"] == 0 and again["items_written"] == 0
    assert db.stats.items_written == written


def test_a_new_tag_reads_only_its_new_blobs(upstream_repo: Path, aws: Any) -> None:
    db, releases = aws
    run(upstream_repo, aws, history=True)
    git(upstream_repo, "checkout", "-q", "master")
    commit(upstream_repo, {"new.c": b"int brand_new;\n"}, "Add new", "2004-04-04")
    git(upstream_repo, "tag", "1_2")
    report = run(upstream_repo, aws, history=True)
    assert report["tags"]["versions"] == ["1.2"] and report["commits"] == 1
    assert report["blobs"]["read"] == 1  # new.c; the others were hashed by the first run
    assert db.packages()["foo"].versions == ("1.0", "1.1", "1.2")
    assert db.lookup([sha(LICENCE)])[sha(LICENCE)].packages["foo"] == VersionRange("1.0", "1.2")
    # the fix, merged into master, is in 1.2 now: its history stays (its commit of the first run), its
    # release range is new, and so is its first release tag: as one run of the whole repository says
    fix = db.lookup([sha(FIX)])[sha(FIX)]
    assert (
        fix.packages == {"foo": VersionRange("1.2", "1.2")}
        and fix.history["foo"]["s"] == "Fix the return code"
    )
    options = GitIngestOptions(history=True)
    once = ingest(upstream_repo, "bar", aws, options)
    assert once["tags"]["new"] == 3
    for data in (FIX, LICENCE, b"int brand_new;\n"):
        found = db.lookup([sha(data)])[sha(data)]
        assert found.history["foo"] == found.history["bar"], data
    assert fix.history["foo"]["r"] == "1_2"
    assert "new.c" in releases.load("foo", "1.2").files


def test_a_history_ingested_in_two_runs_says_what_one_run_says(tmp_path: Path, aws: Any) -> None:
    # Given a content committed at two paths in no release, ingested with its history; then copied to
    # four more paths and released (1_0), and ingested again
    repo = tmp_path / "copies"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "master")
    text = b"int shared_by_six_paths;\n"
    first = commit(repo, {"d.c": text, "e.c": text}, "Two copies", "2001-01-01")
    run(repo, aws, history=True)
    commit(repo, {"a.c": text, "b.c": text, "c.c": text, "f.c": text}, "Four more", "2002-02-02")
    git(repo, "tag", "1_0")
    run(repo, aws, history=True)
    # When the same repository is ingested in one run under another name
    db, _ = aws
    ingest(repo, "bar", aws, GitIngestOptions(history=True))
    # Then both say the content's first commit, its first release, and the same four of its six paths
    history = db.lookup([sha(text)])[sha(text)].history
    assert history["foo"] == history["bar"]
    assert (history["foo"]["c"], history["foo"]["r"]) == (first, "1_0")
    assert history["foo"]["p"] == ["a.c", "b.c", "c.c", "d.c"]  # the first four by name


def test_a_missing_blob_is_counted_and_named_and_the_rest_ingested(upstream_repo: Path, aws: Any) -> None:
    # Given a copy that lacks one blob (as a partial clone would)
    blob = git(upstream_repo, "rev-parse", "1_0:main.c")
    (upstream_repo / ".git" / "objects" / blob[:2] / blob[2:]).unlink()
    db, releases = aws
    report = run(upstream_repo, aws, history=True)
    # Then the ingest ends, names the blob with its path, and has everything else
    assert report["blobs"]["missing"] == 1
    assert report["blobs"]["missing_named"] == [{"blob": blob, "paths": ["main.c"]}]
    assert releases.load("foo", "1.0").files == {"LICENSE": sha(LICENCE)}
    assert set(db.lookup([sha(LICENCE), sha(FIX)])) == {sha(LICENCE), sha(FIX)}
    # and a later run with nothing new still names it
    again = run(upstream_repo, aws, history=True)
    assert again["blobs"]["missing_named"] == [{"blob": blob, "paths": ["main.c"]}]
    assert again["blobs"]["missing_met_now"] == 0 and again["items_written"] == 0


def test_normal_forms_of_a_history_blob_carry_its_provenance(tmp_path: Path, aws: Any) -> None:
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    text = b"/* $Id: x.c,v 1.2 2001/01/01 $ */\nint x;   \n"
    commit(repo, {"x.c": text}, "Keywords and trailing blanks", "2005-05-05")
    db, _ = aws
    run(repo, aws, history=True)
    d = digest_bytes(text)
    found = db.lookup([d.sha256, d.kw, d.ws])
    assert {f for info in found.values() for f in info.forms} == {"raw", "kw", "ws"}
    assert all(info.history["foo"]["s"] == "Keywords and trailing blanks" for info in found.values())


def _evidence_index(releases: Releases, package: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The package's hunk index and revisions, without where each content lies (each run packs anew)."""
    content = ContentStore(releases.s3, releases.bucket)
    hunks: dict[str, Any] = {}
    for shard in content.shards(package, "hunks", range(SHARDS)).values():
        hunks.update(shard)
    revisions: dict[str, Any] = {}
    for shard in content.shards(package, "history", range(SHARDS)).values():
        revisions.update({p: [r[:3] for r in revs] for p, revs in shard["paths"].items()})
    return hunks, revisions


def test_a_submodule_is_left_out_of_the_release_and_the_history(tmp_path: Path, aws: Any) -> None:
    # Given a tag whose tree holds a file and a submodule (a gitlink: another repository's commit)
    repo = tmp_path / "with-submodule"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "master")
    (repo / "main.c").write_bytes(b"int main;\n")
    git(repo, "add", "main.c")
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{'1' * 40},vendor/lib")
    git(repo, "commit", "-q", "-m", "with a submodule")
    git(repo, "tag", "1_0")
    _, releases = aws
    # When it is ingested with its history
    report = ingest(repo, "foo", aws, GitIngestOptions(history=True))
    # Then the release lists the file alone, and no blob is missing (the submodule's commit is none)
    assert releases.load("foo", "1.0").files == {"main.c": sha(b"int main;\n")}
    assert report["blobs"]["missing"] == 0 and report["blobs"]["in_history"] == 1


def test_a_history_taken_in_parts_indexes_what_one_run_does(tmp_path: Path, aws: Any) -> None:
    # Given 1,200 commits in which the same one-line changes recur (each cited by its earliest commits)
    repo = long_history(tmp_path, 1_200)
    _, releases = aws
    whole = ingest(repo, "foo", aws, GitIngestOptions(history=True))
    assert whole["complete"] and whole["evidence"]["commits_diffed"] == 1_199  # the root has no parent
    # When the same repository is ingested stopping at every checkpoint (every 500 commits)
    parts = 0
    while True:
        parts += 1
        options = GitIngestOptions(history=True, stop=lambda: True)
        if ingest(repo, "bar", aws, options)["complete"]:
            break
        if parts == 1:  # the first part cites no commit past its checkpoint (commit 499, minute 499)
            first_part = _evidence_index(releases, "bar")[0]
            assert max(p[2] for cited in first_part.values() for p in cited) == "2001-09-09T10:05:40Z"
    # Then it took three runs and its hunk index and revisions are those of one run: the diff worker's
    # changes were taken for exactly the commits each part walked, earliest first
    assert parts == 3
    hunks, revisions = _evidence_index(releases, "foo")
    assert _evidence_index(releases, "bar") == (hunks, revisions)
    assert max(len(cited) for cited in hunks.values()) == MAX_PUBLISHED
    # each state of each path once (the states recur), as git's log of the changes lists them (the root
    # commit has no parent to diff against: its files are the first release's)
    raw = git(repo, "-c", "log.showroot=false", "log", "--raw", "--no-abbrev", "--format=").splitlines()
    states = {(line.split("\t")[1], line.split()[3]) for line in raw if line.startswith(":")}
    assert sum(len(revs) for revs in revisions.values()) == len(states) < 1_199


def test_on_one_cpu_the_diffs_are_made_inline_and_index_the_same(tmp_path: Path, aws: Any) -> None:
    # Given a history, ingested as on a machine of several CPUs (the diffs in a forked worker)
    repo = long_history(tmp_path, 700)
    _, releases = aws
    ingest(repo, "foo", aws, GitIngestOptions(history=True))
    # When this process may run on one CPU only (a Lambda function of less than 1,769 MB)
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})
    try:
        assert usable_cpus() == 1
        report = ingest(repo, "bar", aws, GitIngestOptions(history=True))
    finally:
        os.sched_setaffinity(0, cpus)
    # Then the same commits were diffed here, into the same index
    assert report["evidence"]["commits_diffed"] == 699
    assert _evidence_index(releases, "bar") == _evidence_index(releases, "foo")


class _HeldBack(DiffSplit):
    """A diff worker that stops at commit 50 until the walk has taken the commits from 150 on."""

    def worker_takes(self, n: int) -> bool:
        while n == 50 and self.claim.value > 150:
            time.sleep(0.001)  # waits on the walk's claim, not on a clock
        return super().worker_takes(n)


def test_the_walk_diffs_the_last_commits_until_it_meets_the_worker(
    tmp_path: Path, aws: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a history ingested as usual, and again with a diff worker held back at commit 50 of 300
    repo = long_history(tmp_path, 300)
    _, releases = aws
    ingest(repo, "foo", aws, GitIngestOptions(history=True))
    monkeypatch.setattr(diff_worker, "DiffSplit", _HeldBack)
    report = ingest(repo, "bar", aws, GitIngestOptions(history=True))
    # Then the walk diffed the commits from the last back to at least 150, the worker the rest, and
    # where they met a commit diffed by both counts once: the same index as one worker's
    assert 150 <= report["evidence"]["commits_diffed_by_walk"] <= 250
    assert report["evidence"]["commits_diffed"] == 299
    assert _evidence_index(releases, "bar") == _evidence_index(releases, "foo")


def _walk_waits_for_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk hashes nothing before the worker has sent every commit: what the worker can hash, it
    has (on a small history, the walk would otherwise claim it all first)."""
    hash_pending = history.hash_pending

    def after_the_worker(repo: GitRepo, run: Any, pending: list[Any], changes: Any) -> None:
        while changes.reached < len(pending) and not changes.feed.done:
            changes.more()
        hash_pending(repo, run, pending, changes)

    monkeypatch.setattr(history, "hash_pending", after_the_worker)


def test_a_worker_forked_before_the_state_is_read_serves_a_new_package_only(
    tmp_path: Path, aws: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a history, and a diff worker forked before the database was at hand (as the CLI does)
    repo = long_history(tmp_path, 200)
    _walk_waits_for_the_worker(monkeypatch)
    _, releases = aws
    options = GitIngestOptions(history=True)
    early = start_diff_worker(GitRepo(str(repo / ".git")), "foo", options)
    assert early is not None  # (these machines have two CPUs)
    # When the package is new to the database, the run makes its diffs with that worker
    ingest(repo, "foo", aws, options, worker=early)
    ingest(repo, "bar", aws, options)
    assert _evidence_index(releases, "foo") == _evidence_index(releases, "bar")
    packs = releases.git_state("foo")["content"]["packs"]
    assert any(key.startswith(early.pack.key_prefix) for key in packs)
    assert not Path(early.folder.name).exists()  # its pack uploaded, its folder removed
    # and when the package has a state (a later run, one commit more), a worker forked on the guess
    # is stopped and another one started with what the state holds
    commit(repo, {"f9.c": b"int f9;\n"}, "one more", "2024-01-01")
    early = start_diff_worker(GitRepo(str(repo / ".git")), "foo", options)
    assert early is not None
    again = ingest(repo, "foo", aws, options, worker=early)
    assert again["commits"] == 1 and again["evidence"]["commits_diffed"] == 1
    assert not any(k.startswith(early.pack.key_prefix) for k in releases.git_state("foo")["content"]["packs"])
    assert not Path(early.folder.name).exists()
    ingest(repo, "bar", aws, options)
    assert _evidence_index(releases, "foo") == _evidence_index(releases, "bar")


def _states_repo(tmp_path: Path) -> tuple[Path, list[bytes]]:
    """a.c in twelve states, one commit each (new files at 0, 4 and 8), tagged ``1_0`` at state 3; this
    copy lacks state 8 (a partial clone)."""
    repo = tmp_path / "states"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "master")
    states = [b"int a = %d;\n" % i + b"int b;\n" * 30 for i in range(12)]
    for i, data in enumerate(states):
        extra = {f"new{i}.c": b"int new%d;\n" % i} if i % 4 == 0 else {}
        commit(repo, {"a.c": data, **extra}, f"State {i}", f"2001-01-{i + 1:02d}")
        if i == 3:
            git(repo, "tag", "1_0")
    lacking = sha1_of(states[8])
    (repo / ".git" / "objects" / lacking[:2] / lacking[2:]).unlink()
    return repo, states


def sha1_of(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_the_diff_worker_hashes_and_packs_what_its_commits_bring_until_the_walks_claim(
    tmp_path: Path,
) -> None:
    repo, states = _states_repo(tmp_path)
    gitrepo = GitRepo(str(repo / ".git"))

    # Given the diff worker, with one state an earlier run hashed already
    def worker(claimed: int | None = None) -> tuple[dict[str, Any], dict[str, str], PackWriter]:
        pack = PackWriter(tmp_path / f"pack{claimed}", "k")
        pack.folder.mkdir()
        work = BlobWork({sha1_of(states[10]): ["known"]}, pack, {})
        if claimed is not None:
            work.claimed.value = claimed
        made = list(commit_changes(gitrepo.path, gitrepo.tags(), [], gitrepo.ref_tips(), work))
        got = [c for c in made if isinstance(c, CommitChanges)]
        assert isinstance(made[0], Trees) and len(got) == len(made) - 1  # the tree diffs first
        hashed = {blob: (digests, where) for c in got for blob, digests, where, _ in c.blobs}
        return hashed, {blob: path for c in got for blob, path in c.missing}, pack

    hashed, missing, pack = worker()
    # Then it hashed the blobs its diffs brought: neither the root commit's (no diff), nor the tag's
    # (the walk reads those for their sketches), nor the earlier run's; and it named the one it lacks
    mine = [states[i] for i in (1, 2, 4, 5, 6, 7, 9, 11)] + [b"int new4;\n", b"int new8;\n"]
    assert set(hashed) == {sha1_of(data) for data in mine}
    assert missing == {sha1_of(states[8]): "a.c"}
    # with the digests of their contents, packed where it says
    files = {key: path.read_bytes() for path, key in pack.on_disk()}
    for data in mine:
        digests, (key, off, n) = hashed[sha1_of(data)]
        d = digest_bytes(data)
        assert digests == [d.sha256, d.kw, d.ws]
        assert unpack(files[key][off : off + n]) == data
    # and from the commit the walk claimed on (the seventh), it hashes nothing: the walk does
    hashed, missing, _ = worker(claimed=6)
    assert set(hashed) == {
        sha1_of(data) for data in [states[1], states[2], states[4], states[5], b"int new4;\n"]
    }
    assert missing == {}


def test_blobs_hashed_by_the_worker_or_the_walk_make_one_database(tmp_path: Path, aws: Any) -> None:
    # Given the history ingested with the diff worker beside the walk, and again on one CPU (the walk
    # hashes every blob)
    repo, states = _states_repo(tmp_path)
    db, releases = aws
    forked = ingest(repo, "foo", aws, GitIngestOptions(history=True))
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})
    try:
        inline = ingest(repo, "bar", aws, GitIngestOptions(history=True))
    finally:
        os.sched_setaffinity(0, cpus)
    # Then each distinct blob was hashed once, the lacking one is named with its path, both ways
    assert forked["blobs"]["read"] == inline["blobs"]["read"] == 14  # 11 states of a.c, 3 new files
    for report in (forked, inline):
        assert report["blobs"]["missing_named"] == [{"blob": sha1_of(states[8]), "paths": ["a.c"]}]
    # and every content has the same provenance and range under both packages
    contents = [s for i, s in enumerate(states) if i != 8] + [b"int new%d;\n" % i for i in (0, 4, 8)]
    found = db.lookup([sha(data) for data in contents])
    assert len(found) == len(contents)
    for info in found.values():
        assert info.history["foo"] == info.history["bar"]
        assert info.packages.get("foo") == info.packages.get("bar")
    # and the same revisions and hunks, each state's content stored and readable
    assert _evidence_index(releases, "foo") == _evidence_index(releases, "bar")
    content = ContentStore(releases.s3, releases.bucket)
    for package in ("foo", "bar"):
        [shard] = [
            v for v in content.shards(package, "history", range(SHARDS)).values() if "a.c" in v["paths"]
        ]
        where = {r[0]: tuple(r[3:6]) for r in shard["paths"]["a.c"]}
        assert set(content.blobs(where).values()) == {s for i, s in enumerate(states) if i not in (0, 8)}


@pytest.mark.parametrize("history", [False, True])
def test_a_later_runs_new_tag_writes_its_changes_not_its_whole_tree(
    tmp_path: Path, aws: Any, history: bool
) -> None:
    # Given a repository of 60 files, tags 1_0 and 1_1 ingested by one run (1.1 the open release)
    repo = tmp_path / "src"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "master")
    tree: dict[str, bytes | None] = {f"f{i}.c": f"int f{i} = {i};\n".encode() for i in range(60)}
    commit(repo, tree, "Import", "2001-01-01")
    git(repo, "tag", "1_0")
    commit(repo, {"f1.c": b"int f1 = -1;\n"}, "Change f1", "2002-01-01")
    git(repo, "tag", "1_1")
    db, _ = aws
    first = run(repo, aws, history=history)
    assert first["ranges"]["mode"] == "open"
    # When a later run finds 1_2, which changes f2, removes f3 and adds g.c
    commit(repo, {"f2.c": b"int f2 = -2;\n", "f3.c": None, "g.c": b"int g;\n"}, "Next", "2003-01-01")
    git(repo, "tag", "1_2")
    report = run(repo, aws, history=history)
    # Then it writes the digests of its new contents and closes those of 1.1 it lacks, not its 59 files
    # (each content here is its own three forms: one item)
    assert report["ranges"] == {"mode": "open", "departed": 2}  # f2.c and f3.c of 1.1
    assert report["items_written"] == 4  # f2.c and g.c new, f2.c and f3.c of 1.1 closed
    # and every file's range is its exact hull
    states = {
        "f0.c": ("1.0", "1.2"),
        "f1.c": ("1.1", "1.2"),
        "f2.c": ("1.2", "1.2"),
        "f3.c": ("1.0", "1.1"),
        "g.c": ("1.2", "1.2"),
    }
    contents = {
        "f0.c": b"int f0 = 0;\n",
        "f1.c": b"int f1 = -1;\n",
        "f2.c": b"int f2 = -2;\n",
        "f3.c": b"int f3 = 3;\n",
        "g.c": b"int g;\n",
    }
    found = db.lookup([sha(c) for c in contents.values()] + [sha(b"int f2 = 2;\n")])
    assert {p: found[sha(c)].packages["foo"] for p, c in contents.items()} == {
        p: VersionRange(lo, hi) for p, (lo, hi) in states.items()
    }
    assert found[sha(b"int f2 = 2;\n")].packages["foo"] == VersionRange("1.0", "1.1")
