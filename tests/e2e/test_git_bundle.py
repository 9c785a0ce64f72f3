"""A git bundle uploaded to upstream/<package>/git/: ingested by the ingest function, part by part, and
an incremental bundle on top of it."""

from __future__ import annotations

from pathlib import Path

from gitrepos import FIX, LICENCE, build_upstream_repo, commit, git, sha

from dropscan.git.repo import GitRepo
from dropscan.local.embedded import embedded
from dropscan.models import VersionRange
from dropscan.stages.ingest_git import GitIngestOptions, ingest_git
from dropscan.store.content import ContentStore
from dropscan.store.releases import Releases


def test_a_bundle_is_ingested_part_by_part_as_one_run_would(tmp_path: Path) -> None:
    # Given a repository's bundle, and an ingest budget that stops after every tag and 500 commits
    repo = build_upstream_repo(tmp_path)
    bundle = tmp_path / "foo.bundle"
    git(repo, "bundle", "create", "-q", str(bundle), "--all")
    with embedded(parameters={"IngestBudgetSeconds": "0"}) as es:
        # When it is uploaded
        report = es.client.ingest_bundle(bundle, "foo")
        # Then the function went on from its checkpoints to the end: every tag and the history
        assert report["complete"]
        db = es.client.db
        assert db.packages()["foo"].versions == ("1.0", "1.1")
        found = db.lookup([sha(LICENCE), sha(FIX)])
        assert found[sha(LICENCE)].packages == {"foo": VersionRange("1.0", "1.1")}
        assert found[sha(FIX)].history["foo"]["s"] == "Fix the return code"
        bundled = {d: found[d] for d in found}
        # and the same as the repository ingested in one run into another stack
    with embedded() as other:
        releases = Releases(other.client.s3, other.names.upstream_bucket)
        content = ContentStore(other.client.s3, other.names.upstream_bucket)
        options = GitIngestOptions(history=True)
        ingest_git(GitRepo(str(repo / ".git")), "foo", other.client.db, releases, content, options)
        assert other.client.db.lookup([sha(LICENCE), sha(FIX)]) == bundled


def test_an_incremental_bundle_stands_on_the_packs_of_earlier_ones(tmp_path: Path) -> None:
    repo = build_upstream_repo(tmp_path)
    first = tmp_path / "foo-1.bundle"
    git(repo, "bundle", "create", "-q", str(first), "--all")
    git(repo, "checkout", "-q", "master")
    new = b"int brand_new(void);\n" * 50
    commit(repo, {"new.c": new, "LICENSE": LICENCE + b"\n"}, "Add new, touch the licence", "2004-04-04")
    git(repo, "tag", "1_2")
    second = tmp_path / "foo-2.bundle"
    git(repo, "bundle", "create", "-q", str(second), "v1.1..master", "1_2")  # thin: stands on 1.1
    with embedded() as es:
        es.client.ingest_bundle(first, "foo")
        report = es.client.ingest_bundle(second, "foo")
        assert report["complete"] and report["tags"]["versions"] == ["1.2"]
        assert report["blobs"]["read"] == 2 and report["blobs"]["missing"] == 0, report  # new.c, licence
        db = es.client.db
        assert db.packages()["foo"].versions == ("1.0", "1.1", "1.2")
        found = db.lookup([sha(new), sha(LICENCE), sha(FIX)])
        assert found[sha(new)].packages == {"foo": VersionRange("1.2", "1.2")}
        assert found[sha(LICENCE)].packages == {"foo": VersionRange("1.0", "1.1")}  # changed in 1.2
        assert found[sha(FIX)].packages == {"foo": VersionRange("1.2", "1.2")}  # merged: released now
        releases = Releases(es.client.s3, es.names.upstream_bucket)
        v12 = releases.load("foo", "1.2")
        assert v12 is not None
        assert set(v12.files) == {"LICENSE", "main.c", "util/new.c", "link.c", "new.c"}


def test_a_release_from_its_tarball_and_from_its_tag_give_the_same_answers(tmp_path: Path) -> None:
    # Given release 1.1 as its tarball (git archive) and as its tag
    repo = build_upstream_repo(tmp_path)
    tarball = tmp_path / "foo-1.1.tar.gz"
    git(repo, "archive", "--prefix=foo-1.1/", "-o", str(tarball), "v1.1")
    with embedded() as es:
        es.client.ingest(tarball, "tarball", "1.1")
        releases = Releases(es.client.s3, es.names.upstream_bucket)
        content = ContentStore(es.client.s3, es.names.upstream_bucket)
        options = GitIngestOptions(tags="v1.1")
        ingest_git(GitRepo(str(repo / ".git")), "git", es.client.db, releases, content, options)
        # Then both have the same files, and the database says the same of each
        from_tar, from_git = releases.load("tarball", "1.1"), releases.load("git", "1.1")
        assert from_tar is not None and from_git is not None
        assert {p.removeprefix("foo-1.1/"): d for p, d in from_tar.files.items()} == from_git.files
        found = es.client.db.lookup(set(from_git.files.values()))
        assert len(found) == len(set(from_git.files.values()))
        for info in found.values():
            assert info.packages["tarball"] == info.packages["git"] == VersionRange("1.1", "1.1")
