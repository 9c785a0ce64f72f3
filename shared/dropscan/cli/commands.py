"""The dropscan command line: the parser and the commands other than scan (cli.scan), the memory's
(cli.memory) and the demo (cli.demo): hash, ingest, ingest-git, db, report, up."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from dropscan import __version__
from dropscan.cli.common import UsageError, add_target, default_data_dir, progress, target_of
from dropscan.cli.memory import add_memory_commands
from dropscan.cli.scan import add_scan_command
from dropscan.cli.users import add_user_commands
from dropscan.keys import parse_archive_name
from dropscan.models import Trust
from dropscan.reports import FORMATS


# ------------------------------------------------------------------ hash
def cmd_hash(a: argparse.Namespace) -> int:
    from dropscan.archive import ArchiveReadError, LimitExceeded
    from dropscan.archive.halves import walk_file

    src = Path(a.archive).expanduser()
    if not src.is_file():
        raise UsageError(f"no such archive: {src}")
    out: IO[str] = open(a.out, "w") if a.out else sys.stdout  # noqa: SIM115
    try:
        encode = json.JSONEncoder(separators=(",", ":")).encode  # one encoder, not one per record
        for rec in walk_file(src, src.name):
            out.write(encode(rec.to_json()) + "\n")
    except LimitExceeded as e:
        print(f"dropscan: {src}: rejected: {e.reason}", file=sys.stderr)
        return 1
    except ArchiveReadError as e:
        print(f"dropscan: {src}: archive is corrupt or truncated: {e}", file=sys.stderr)
        return 1
    finally:
        if a.out:
            out.close()
    return 0


# ------------------------------------------------------------------ ingest
def cmd_ingest(a: argparse.Namespace) -> int:
    archive = Path(a.archive).expanduser()
    if not archive.is_file():
        raise UsageError(f"no such archive: {archive}")
    package, version = a.package, a.version
    if not (package and version):
        parsed = parse_archive_name(archive.name)
        if parsed is None:
            raise UsageError(
                f"cannot tell package and version from {archive.name}: give --package and --version"
            )
        package, version = package or parsed[0], version or parsed[1]
    with target_of(a) as (client, _, _):
        with progress(a.quiet)(f"ingesting {package} {version}…"):
            client.ingest(archive, package, version, trust=Trust(a.trust) if a.trust else None)
        info = client.db.packages([package])[package]
    print(
        json.dumps(
            {"package": package, "version": version, "trust": info.trust.value, "versions": info.versions}
        )
    )
    return 0


def cmd_ingest_git(a: argparse.Namespace) -> int:
    import re

    from dropscan.git.repo import GitReadError, GitRepo
    from dropscan.stages.ingest_git import GitIngestOptions, ingest_git, start_diff_worker
    from dropscan.store.content import ContentStore
    from dropscan.store.releases import Releases

    try:
        pattern = re.compile(a.version_from) if a.version_from else None
    except re.error as e:
        raise UsageError(f"--version-from: {e}") from e
    try:
        repo = GitRepo(str(Path(a.repo).expanduser()))
    except GitReadError as e:
        raise UsageError(str(e)) from e
    options = GitIngestOptions(
        tags=a.tags,
        version_from=pattern,
        history=a.history,
        trust=Trust(a.trust) if a.trust else None,
        source=str(a.repo),
    )
    quiet = a.quiet

    def say(text: str) -> None:
        if not quiet:
            print(f"dropscan: {text}", file=sys.stderr, flush=True)

    # forked before the stack starts, on the guess that this is the package's first ingest (the long one)
    worker = start_diff_worker(repo, a.package, options)
    try:
        with target_of(a) as (client, _, _):
            releases = Releases(client.s3, client.names.upstream_bucket)
            content = ContentStore(client.s3, client.names.upstream_bucket)
            report = ingest_git(
                repo, a.package, client.db, releases, content, options, progress=say, worker=worker
            )
            # nothing new: the saved database is already this one (saving it again took seconds)
            client.changed = bool(
                report["items_written"]
                or report["tags"]["new"]
                or report["blobs"]["read"]
                or report["commits"]
            ) or (options.trust is not None)
    finally:
        if worker is not None:
            worker.cleanup()
    print(json.dumps(report))
    return 0


# ------------------------------------------------------------------ db
def cmd_db(a: argparse.Namespace) -> int:
    from dropscan.models import FileDigests, Release
    from dropscan.store.dump import export_db, import_db, read_hash_list
    from dropscan.store.releases import Releases, save_release

    with target_of(a) as (client, _, _):
        bucket = client.names.upstream_bucket
        if a.db_command == "stats":
            print(json.dumps(client.db.stats_summary(), indent=1))
        elif a.db_command == "trust":
            client.set_trust(a.package, Trust(a.level))
        elif a.db_command == "export":
            with open(a.file, "wb") as f:
                st = export_db(client.db, client.s3, bucket, f)
            print(json.dumps(vars(st)))
        elif a.db_command == "import":
            path = Path(a.file)
            if not path.is_file():
                raise UsageError(f"no such file: {path}")
            if path.read_bytes()[:2] == b"\x1f\x8b":
                with path.open("rb") as f:
                    st = import_db(client.db, client.s3, bucket, f)
                print(json.dumps(vars(st)))
            else:
                if not (a.package and a.version):
                    raise UsageError("a sha256sum or hashdeep list needs --package and --version")
                files = read_hash_list(path)
                if not files:
                    raise UsageError(f"{path}: no SHA-256 lines (sha256sum or hashdeep -c sha256 output)")
                save_release(client.s3, bucket, Release(a.package, a.version, files))
                trust = Trust(a.trust) if a.trust else None
                written = client.db.add_release(
                    a.package,
                    a.version,
                    [FileDigests(d, d, d) for d in files.values()],
                    trust,
                    previous=lambda v: Releases(client.s3, bucket).raw_digests(a.package, v),
                )
                print(
                    json.dumps(
                        {"package": a.package, "version": a.version, "files": len(files), "written": written}
                    )
                )
            client.changed = True
    return 0


# ------------------------------------------------------------------ report
def cmd_report(a: argparse.Namespace) -> int:
    from dropscan.reports import ManifestError, load_manifest, render

    try:
        manifest = load_manifest(Path(a.manifest).expanduser())
    except ManifestError as e:  # a bad input file, not bad usage: one line, no usage text
        print(f"dropscan: error: {e}", file=sys.stderr)
        return 2
    text = render(manifest, a.format)
    if a.format == "text":  # the reports `scan --manifest-out` wrote beside it, as local files
        from dropscan.reports.summary import body, subject

        beside = Path(a.manifest).expanduser().parent
        local = {"manifest": str(Path(a.manifest))} | {
            name: str(beside / key.rsplit("/", 1)[-1])
            for name, key in (manifest.get("reports") or {}).items()
            if (beside / key.rsplit("/", 1)[-1]).is_file()
        }
        if len(local) > 1:
            text = f"{subject(manifest)}\n\n{body(manifest, local=local)}"
    if a.out:
        Path(a.out).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


# ------------------------------------------------------------------ up / demo
def cmd_up(a: argparse.Namespace) -> int:
    from dropscan.local.server import serve

    return serve(
        host=a.host, port=a.port, eml_dir=Path(a.eml_dir), data_dir=Path(a.data_dir), verbose=a.verbose
    )


def cmd_demo(a: argparse.Namespace) -> int:
    from dropscan.cli.demo import run_demo

    return run_demo(Path(a.cache), Path(a.out), quiet=a.quiet)


# ------------------------------------------------------------------ entry point
def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="dropscan", description="Audit source drops against trusted upstream releases."
    )
    ap.add_argument("--version", action="version", version=f"dropscan {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)

    add_scan_command(sub, add_target)

    p = sub.add_parser("hash", help="the unpack stage alone: one JSON line per file")
    p.add_argument("archive", help="an archive file")
    p.add_argument("--out", metavar="FILE", help="write here instead of standard output")
    p.add_argument(
        "--quiet", "-q", action="store_true", help="accepted for symmetry: hash prints only its records"
    )
    p.set_defaults(func=cmd_hash)

    p = sub.add_parser("ingest", help="add an upstream release to the upstream database")
    p.add_argument("archive", help="the upstream release's archive, e.g. linux_6.1.176.orig.tar.xz")
    p.add_argument("--package", help="package name (default: from the archive's name)")
    p.add_argument("--version", help="version (default: from the archive's name)")
    p.add_argument("--trust", choices=[t.value for t in Trust], help="the package's trust (new: high)")
    add_target(p)
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser(
        "ingest-git", help="add a package's releases (its tags) and, with --history, every commit from git"
    )
    p.add_argument("repo", help="a git repository (bare or not; a partial clone is read with what it has)")
    p.add_argument("--package", required=True, help="the package its tags are releases of")
    p.add_argument("--tags", default="*", help="only tags matching this glob (default: all)")
    p.add_argument(
        "--version-from",
        metavar="REGEX",
        help="the version of a tag: the first group of this regex (default: from the first digit, _ as .)",
    )
    p.add_argument(
        "--history",
        action="store_true",
        help="also every file of every commit reachable from any ref, with its first commit",
    )
    p.add_argument("--trust", choices=[t.value for t in Trust], help="set the package's trust")
    add_target(p)
    p.set_defaults(func=cmd_ingest_git)

    db = sub.add_parser("db", help="the upstream database: stats, export, import, trust")
    dbs = db.add_subparsers(dest="db_command", required=True)
    p = dbs.add_parser("stats", help="packages, versions, trust and item counts")
    add_target(p)
    p = dbs.add_parser("export", help="write a compressed, versioned dump (dropscan.upstream-db/1)")
    p.add_argument("file")
    add_target(p)
    p = dbs.add_parser("import", help="merge a dump, or a sha256sum/hashdeep list as a known-good release")
    p.add_argument("file")
    p.add_argument("--package", help="for a hash list: the package it is a release of")
    p.add_argument("--version", help="for a hash list: the release's version")
    p.add_argument("--trust", choices=[t.value for t in Trust], help="for a hash list: the package's trust")
    add_target(p)
    p = dbs.add_parser("trust", help="set a package's trust without re-ingesting")
    p.add_argument("package")
    p.add_argument("level", choices=[t.value for t in Trust])
    add_target(p)
    db.set_defaults(func=cmd_db)

    p = sub.add_parser("report", help="render a manifest as text, HTML, SPDX 2.3 or CycloneDX 1.6 JSON")
    p.add_argument("manifest", help="a manifest.json (plain or gzip-compressed)")
    p.add_argument("--format", "-f", choices=list(FORMATS), default="text", help="default: %(default)s")
    p.add_argument("--out", "-o", metavar="FILE", help="write here instead of standard output")
    p.set_defaults(func=cmd_report)

    add_memory_commands(sub, add_target)
    add_user_commands(sub)

    p = sub.add_parser(
        "up",
        help="run the local stack as a moto server with the dispatcher",
        description="The stack of template.yaml in a moto server: any S3 client's upload to its drops"
        " bucket is scanned and its notification written as an .eml file. The log says, per scan, its"
        " counts every 5 s while it runs and one line of what it found as it ends; nothing while idle."
        " moto takes any access key; the banner prints the export lines that give one to the AWS CLI.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    p.add_argument("--port", type=int, default=4566, help="port to listen on (default: %(default)s)")
    p.add_argument(
        "--eml-dir",
        metavar="DIR",
        default="notifications",
        help="where each notification is written as <scan id>.eml (default: %(default)s)",
    )
    p.add_argument(
        "--data-dir",
        metavar="DIR",
        default=str(default_data_dir()),
        help="where the functions' log is kept, logs/functions.log (default: %(default)s)",
    )
    p.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="also print each invocation of a function, each scan's counts every second, each"
        " notification whole and moto's access log (quiet by default)",
    )
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("demo", help="scan a supplier drop built from real PyPI sdists")
    p.add_argument("--cache", default=".cache/demo", help="folder holding the downloaded sdists")
    p.add_argument(
        "--out", default="demo-out", help="the drop, manifest, reports, e-mail and database (%(default)s)"
    )
    p.add_argument("--quiet", "-q", action="store_true", help="no progress and no summary")
    p.set_defaults(func=cmd_demo)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    try:
        rc: int = a.func(a)
    except UsageError as e:
        parser.print_usage(sys.stderr)
        print(f"dropscan: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # the user gets one clear line; the traceback goes to the log
        print(f"dropscan: {type(e).__name__}: {e}", file=sys.stderr)
        if os.environ.get("DROPSCAN_DEBUG"):
            raise
        return 1
    return rc


def run() -> None:
    """The ``dropscan`` script: :func:`main`, its exit handlers (temporary folders, forked workers, log
    handlers), then the end of the process, without the interpreter freeing every object of the embedded
    stack's tables one by one (a second after an ingest of BusyBox's history, for nothing)."""
    code = main()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a reader gone, a stream closed
            stream.flush()
    atexit._run_exitfuncs()
    os._exit(code)


if __name__ == "__main__":
    run()
