"""The dropscan command line: scan, hash, ingest, db, report, up, demo."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from dropscan import __version__
from dropscan.cli.memory import add_memory_commands
from dropscan.cli.web import add_web_commands
from dropscan.keys import parse_archive_name
from dropscan.models import Trust
from dropscan.reports import FORMATS


class UsageError(Exception):
    """Bad arguments: exit status 2."""


@dataclass(frozen=True)
class UpstreamArg:
    package: str
    version: str
    archive: Path


def parse_upstream(text: str) -> UpstreamArg:
    """PACKAGE@VERSION=ARCHIVE, or just ARCHIVE named like busybox-1.35.0.tar.bz2."""
    spec, sep, path = text.partition("=")
    if not sep:
        spec, path = "", text
    archive = Path(path).expanduser()
    if spec:
        package, at, version = spec.partition("@")
        if not at or not package or not version:
            raise UsageError(f"--upstream {text!r}: expected PACKAGE@VERSION=ARCHIVE")
    else:
        parsed = parse_archive_name(archive.name)
        if parsed is None:
            raise UsageError(
                f"--upstream {text!r}: cannot tell package and version; use PACKAGE@VERSION=ARCHIVE"
            )
        package, version = parsed
    if not archive.is_file():
        raise UsageError(f"--upstream {text!r}: no such file {archive}")
    return UpstreamArg(package, version, archive)


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "dropscan"


def _progress(quiet: bool) -> Any:
    """A spinner on stderr when it is a terminal; machine-readable output stays on stdout."""
    from rich.console import Console

    console = Console(stderr=True)
    enabled = not quiet and console.is_terminal

    @contextmanager
    def status(text: str) -> Iterator[None]:
        if enabled:
            with console.status(text):
                yield
        else:
            yield

    return status


# ------------------------------------------------------------------ scan
@dataclass(frozen=True)
class ScanRequest:
    """One ``dropscan scan``: a drop, the upstreams to ingest first, and where the results go."""

    drop: Path
    supplier: str = "local"
    upstreams: Sequence[UpstreamArg] = ()
    low_trust: Sequence[str] = ()
    metadata: dict[str, str] = field(default_factory=dict)
    manifest_out: Path | None = None
    eml_dir: Path | None = None
    data_dir: Path = field(default_factory=lambda: default_data_dir())
    endpoint_url: str | None = None
    stack: str | None = None
    timeout: float = 3600.0
    quiet: bool = False


def cmd_scan(a: argparse.Namespace) -> int:
    drop = Path(a.drop).expanduser()
    if not drop.is_file():
        raise UsageError(f"no such drop archive: {drop}")
    metadata = {"components": ",".join(a.declare)} if a.declare else {}
    if a.arch:
        metadata["arch"] = a.arch
    if a.product:
        metadata["product"] = a.product
    request = ScanRequest(
        drop=drop,
        supplier=a.supplier,
        upstreams=[parse_upstream(u) for u in a.upstream],
        low_trust=a.low_trust,
        metadata=metadata,
        manifest_out=Path(a.manifest_out) if a.manifest_out else None,
        eml_dir=Path(a.eml_dir) if a.eml_dir else None,
        data_dir=Path(a.data_dir),
        endpoint_url=a.endpoint_url,
        stack=a.stack,
        timeout=a.timeout,
        quiet=a.quiet,
    )
    return scan_drop(request)


def scan_drop(r: ScanRequest) -> int:
    """Ingest the upstreams, upload the drop, wait for its manifest and notification, save the results;
    0 when the scan completed, 1 when it was rejected, failed or did not end in time."""
    status = _progress(r.quiet)
    with _stack(r.endpoint_url, r.stack, r.data_dir) as (client, mailbox, save_db_beside):
        for u in r.upstreams:
            with status(f"ingesting {u.package} {u.version} from {u.archive.name}…"):
                client.ingest(
                    u.archive, u.package, u.version, trust=Trust.LOW if u.package in r.low_trust else None
                )
        for p in r.low_trust:
            client.set_trust(p, Trust.LOW)
        save_db_beside()
        with status(f"scanning {r.drop.name}…"):
            key, scan_id = client.upload_drop(r.drop, r.supplier, metadata=r.metadata)
            manifest = client.wait_manifest(r.supplier, scan_id, timeout=r.timeout)
        if manifest is None:
            print(
                f"dropscan: no manifest for {key} within {r.timeout:.0f} s (scan {scan_id})", file=sys.stderr
            )
            return 1
        if mailbox is not None:
            with status("waiting for the notification…"):
                client.pump(lambda: bool(mailbox.for_scan(scan_id)), 60)
            notes = mailbox.for_scan(scan_id)
            if notes and r.eml_dir:
                from dropscan.local.embedded import write_eml

                write_eml(notes[0], r.eml_dir, scan_id)
        if r.manifest_out:
            from dropscan.audit.manifest import to_json

            r.manifest_out.write_text(to_json(manifest))
            # the reports triage wrote, rather than rendering a big drop's documents again
            client.download_reports(manifest, r.manifest_out.parent)
    if not r.quiet:
        from dropscan.reports.summary import body, subject

        print(subject(manifest))
        print()
        print(body(manifest))
    return 0 if manifest["status"] == "complete" else 1


@contextmanager
def _stack(
    endpoint_url: str | None, stack: str | None, data_dir: Path, *, upstream: bool = True
) -> Iterator[tuple[Any, Any, Callable[[], None]]]:
    """The client for the stack the options name: embedded (default), --endpoint-url or --stack.

    With it, its mailbox (embedded only) and what saves the embedded stack's database beside the caller.
    """
    if endpoint_url or stack:
        from dropscan.store.stack import connect

        yield connect(stack or "dropscan-local", endpoint_url), None, lambda: None
        return
    from dropscan.local.embedded import embedded

    logs = data_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with (
        (logs / "functions.log").open("a") as log,
        embedded(log_stream=log, data_dir=data_dir, upstream=upstream) as es,
    ):
        yield es.client, es.mailbox, es.save_db_beside


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
    with _stack(a.endpoint_url, a.stack, Path(a.data_dir)) as (client, _, _):
        with _progress(a.quiet)(f"ingesting {package} {version}…"):
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

    from dropscan.gitrepo import GitReadError, GitRepo
    from dropscan.stages.ingest_git import GitIngestOptions, ingest_git, start_diff_worker
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
        with _stack(a.endpoint_url, a.stack, Path(a.data_dir)) as (client, _, _):
            releases = Releases(client.s3, client.names.upstream_bucket)
            report = ingest_git(repo, a.package, client.db, releases, options, progress=say, worker=worker)
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

    with _stack(a.endpoint_url, a.stack, Path(a.data_dir)) as (client, _, _):
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
    if a.out:
        Path(a.out).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


# ------------------------------------------------------------------ up / demo
def cmd_up(a: argparse.Namespace) -> int:
    from dropscan.local.server import serve

    return serve(host=a.host, port=a.port, eml_dir=Path(a.eml_dir), data_dir=Path(a.data_dir))


def cmd_demo(a: argparse.Namespace) -> int:
    from dropscan.cli.demo import run_demo

    return run_demo(Path(a.cache), Path(a.out), quiet=a.quiet)


# ------------------------------------------------------------------ entry point
def _add_target(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--endpoint-url", help="use a running `dropscan up` at this URL")
    g.add_argument(
        "--stack", help="use the deployed stack of this name (names from its CloudFormation outputs)"
    )
    p.add_argument(
        "--data-dir", default=str(default_data_dir()), help="where the embedded stack keeps its data"
    )
    p.add_argument("--quiet", "-q", action="store_true", help="no progress and no summary")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="dropscan", description="Audit source drops against trusted upstream releases."
    )
    ap.add_argument("--version", action="version", version=f"dropscan {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("scan", help="scan a drop through the whole flow and print its audit summary")
    p.add_argument("drop", help="the drop archive (tar, tar.gz/bz2/xz/zst, zip, 7z ...)")
    p.add_argument(
        "--upstream",
        action="append",
        default=[],
        metavar="PACKAGE@VERSION=ARCHIVE",
        help="ingest this upstream release first (skipped when already in the database); repeatable",
    )
    p.add_argument(
        "--low-trust",
        action="append",
        default=[],
        metavar="PACKAGE",
        help="mark this upstream package low-trust (its matches are reported as such); repeatable",
    )
    p.add_argument("--supplier", default="local", help="supplier name: the drop goes to drops/SUPPLIER/")
    p.add_argument(
        "--declare",
        action="append",
        default=[],
        metavar="PACKAGE@VERSION",
        help="a component the supplier says the drop holds (x-amz-meta-components); repeatable",
    )
    p.add_argument(
        "--arch", help="the device's architecture (x-amz-meta-arch), e.g. mips: configurations must match"
    )
    p.add_argument(
        "--product",
        help="the product the drop is a release of (x-amz-meta-product), compared with its previous drop;"
        " default: the drop's file name without version-like parts",
    )
    p.add_argument("--manifest-out", metavar="FILE", help="write the result manifest (JSON) here")
    p.add_argument("--eml-dir", metavar="DIR", help="write the notification as an .eml file here")
    p.add_argument(
        "--timeout", type=float, default=3600.0, help="seconds to wait for the manifest (default 3600)"
    )
    _add_target(p)
    p.set_defaults(func=cmd_scan)

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
    _add_target(p)
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
    _add_target(p)
    p.set_defaults(func=cmd_ingest_git)

    db = sub.add_parser("db", help="the upstream database: stats, export, import, trust")
    dbs = db.add_subparsers(dest="db_command", required=True)
    p = dbs.add_parser("stats", help="packages, versions, trust and item counts")
    _add_target(p)
    p = dbs.add_parser("export", help="write a compressed, versioned dump (dropscan.upstream-db/1)")
    p.add_argument("file")
    _add_target(p)
    p = dbs.add_parser("import", help="merge a dump, or a sha256sum/hashdeep list as a known-good release")
    p.add_argument("file")
    p.add_argument("--package")
    p.add_argument("--version")
    p.add_argument("--trust", choices=[t.value for t in Trust])
    _add_target(p)
    p = dbs.add_parser("trust", help="set a package's trust without re-ingesting")
    p.add_argument("package")
    p.add_argument("level", choices=[t.value for t in Trust])
    _add_target(p)
    db.set_defaults(func=cmd_db)

    p = sub.add_parser("report", help="render a manifest as text, HTML, SPDX 2.3 or CycloneDX 1.6 JSON")
    p.add_argument("manifest", help="a manifest.json (plain or gzip-compressed)")
    p.add_argument("--format", "-f", choices=list(FORMATS), default="text")
    p.add_argument("--out", "-o", metavar="FILE", help="write here instead of standard output")
    p.set_defaults(func=cmd_report)

    add_memory_commands(sub, _add_target)
    add_web_commands(sub)

    p = sub.add_parser("up", help="run the local stack as a moto server with the dispatcher")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=4566)
    p.add_argument("--eml-dir", default="notifications")
    p.add_argument("--data-dir", default=str(default_data_dir()))
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("demo", help="scan a supplier drop built from real PyPI sdists")
    p.add_argument("--cache", default=".cache/demo", help="folder holding the downloaded sdists")
    p.add_argument("--out", default="demo-out")
    p.add_argument("--quiet", "-q", action="store_true")
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
