"""A component's licence found by its layout (nested archives, REUSE, DEP-5) and by its upstream release.

These use the SPDX-tag detector (licence files with an ``SPDX-License-Identifier`` line): what is under
test is where the licence is looked for and which statement wins, not ScanCode's reading of a text.
ScanCode's answers (U-Boot's ``Licenses/README``, a COPYING's full text) are in tests/e2e.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from dropscan.audit import component_licence as cl
from dropscan.audit.findings import apply, triage_manifest
from dropscan.audit.licenses import TagDetector
from dropscan.audit.triage_plan import wanted_digests

TAGS = TagDetector()
DEP5_HEAD = "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\nUpstream-Name: x\n\n"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def entry(path: str, data: bytes, component: str, cls: str = "identical") -> dict[str, Any]:
    return {"path": path, "sha256": sha(data), "size": len(data), "component": component, "class": cls,
            "kind": "text"}  # fmt: skip


def manifest_of(
    files: dict[str, bytes], components: dict[str, dict[str, Any]], classes: dict[str, str] | None = None
) -> tuple[dict[str, Any], dict[str, bytes]]:
    """A manifest of ``files`` (path -> bytes) in ``components`` (prefix -> identification)."""
    entries = []
    for path, data in files.items():
        prefix = max((p for p in components if path.startswith(p)), key=len, default="")
        entries.append(entry(path, data, prefix, (classes or {}).get(path, "identical")))
    comps = [{"prefix": p, "identified": bool(c.get("package")), **c} for p, c in components.items()]
    manifest = {"status": "complete", "files": entries, "components": comps, "summary": {"review": 0},
                "source": {}}  # fmt: skip
    return manifest, {sha(d): d for d in files.values()}


def licences(manifest: dict[str, Any], content: dict[str, bytes], releases: Any = None) -> dict[str, Any]:
    report = triage_manifest(manifest, content, detector=TAGS, releases=releases or {})
    return {"report": report, "components": {p: c for p, c in report.component_licenses.items()}}


@pytest.mark.parametrize(
    ("prefix", "paths", "root"),
    [
        ("s/bb.tar.bz2!/", ["s/bb.tar.bz2!/busybox-1.35.0/LICENSE", "s/bb.tar.bz2!/busybox-1.35.0/a/b.c"],
         "s/bb.tar.bz2!/busybox-1.35.0/"),
        ("busybox-1.35.0/", ["busybox-1.35.0/LICENSE", "busybox-1.35.0/a.c"], "busybox-1.35.0/"),
        ("vendor/", ["vendor/pkg-1.0/COPYING", "vendor/pkg-1.0/src/x.c"], "vendor/pkg-1.0/"),
        ("pkg/", ["pkg/COPYING", "pkg/sub/x.c"], "pkg/"),
        ("", ["README", "notes.txt"], ""),
        # a nested archive inside the single folder is a file of it, not a folder to enter
        ("a.zip!/", ["a.zip!/inner.tar.gz", "a.zip!/inner.tar.gz!/x/y.c"], "a.zip!/"),
    ],
)  # fmt: skip
def test_the_root_is_the_component_s_single_top_folder(prefix: str, paths: list[str], root: str) -> None:
    assert cl.component_root(prefix, paths) == root


@pytest.mark.parametrize("archive", ["alpha-1.0.tar.gz", "beta-2.0.tar.bz2", "gamma-3.0.zip"])
def test_a_nested_component_s_licence_one_folder_down_is_found(archive: str) -> None:
    prefix = f"src/{archive}!/"
    top = archive.rsplit(".tar", 1)[0].removesuffix(".zip")
    licence = b"SPDX-License-Identifier: GPL-2.0-only\n\nThe GNU General Public License, version 2.\n"
    files = {
        f"{prefix}{top}/LICENSE": licence,
        f"{prefix}{top}/src/main.c": b"int main(void) { return 0; }\n",
        f"{prefix}{top}/docs/LICENSE.other": b"SPDX-License-Identifier: MIT\n",  # not at the root
    }
    manifest, content = manifest_of(files, {prefix: {}})
    assert cl.wanted(manifest["files"]) == {sha(licence): len(licence)}
    assert set(wanted_digests(manifest)) == {sha(licence)}  # read again from the drop by triage
    [found] = licences(manifest, content)["components"].values()
    assert found == {
        "license": "GPL-2.0-only",
        "license_reason": "stated by LICENSE",
        "license_file": f"{prefix}{top}/LICENSE",
        "license_source": "drop",
    }


def test_copying_is_preferred_to_copying_lib_and_other_licence_files() -> None:
    files = {
        "glibc/COPYING.LIB": b"SPDX-License-Identifier: LGPL-2.1-or-later\n",
        "glibc/COPYING": b"SPDX-License-Identifier: GPL-2.0-or-later\n",
        "glibc/LICENSES": b"SPDX-License-Identifier: MIT\n",
    }
    manifest, content = manifest_of(files, {"glibc/": {}})
    assert licences(manifest, content)["components"]["glibc/"]["license"] == "GPL-2.0-or-later"


def test_a_reuse_tree_takes_its_licence_from_dep5_s_files_star_stanza() -> None:
    dep5 = (
        DEP5_HEAD + "Files: *\nCopyright: 2023 Example\nLicense: GPL-2.0-or-later\n\n"
        "Files: contrib/*\nCopyright: 2021 Other\nLicense: BSD-3-Clause\n"
    ).encode()
    files = {
        "tool-1.2/.reuse/dep5": dep5,
        "tool-1.2/LICENSES/GPL-2.0-or-later.txt": b"GNU GENERAL PUBLIC LICENSE Version 2\n",
        "tool-1.2/LICENSES/BSD-3-Clause.txt": b"Redistribution and use in source and binary forms\n",
        "tool-1.2/src/tool.c": b"// SPDX-License-Identifier: GPL-2.0-or-later\nint x;\n",
    }
    manifest, content = manifest_of(files, {"tool-1.2/": {}})
    found = licences(manifest, content)["components"]["tool-1.2/"]
    assert found["license"] == "GPL-2.0-or-later"
    assert found["license_reason"] == "stated by .reuse/dep5, its 'Files: *' stanza (REUSE)"


def test_reuse_licenses_folder_alone_tells_the_licence_only_when_it_holds_one_text() -> None:
    one = {"lib-1/LICENSES/MIT.txt": b"Permission is hereby granted\n", "lib-1/x.c": b"int x;\n"}
    manifest, content = manifest_of(one, {"lib-1/": {}})
    found = licences(manifest, content)["components"]["lib-1/"]
    assert (found["license"], found["license_source"]) == ("MIT", "drop")

    two = {**one, "lib-1/LICENSES/Apache-2.0.txt": b"Apache License\n"}
    manifest, content = manifest_of(two, {"lib-1/": {}})
    result = licences(manifest, content)
    found = result["components"]["lib-1/"]
    assert found["license"] is None
    assert "LICENSES/ holds 2 licence texts" in found["license_reason"]
    [flag] = result["report"].flags
    assert (flag.kind, flag.severity, flag.path) == ("license-unknown", "review", "lib-1/")


@pytest.mark.parametrize(
    ("value", "expression"),
    [
        ("GPL-2", "GPL-2.0-only"),
        ("GPL-2+", "GPL-2.0-or-later"),
        ("LGPL-2.1+ or BSD-3-clause", "LGPL-2.1-or-later OR BSD-3-Clause"),
        ("Expat", "MIT"),
        ("GPL-2.0-only", "GPL-2.0-only"),
    ],
)
def test_debian_short_names_become_spdx(value: str, expression: str) -> None:
    assert cl.debian_expression(value) == (expression, "")


def test_a_debian_source_tree_takes_its_licence_from_debian_copyright() -> None:
    copyright_ = (
        DEP5_HEAD + "Files: *\nCopyright: 1999-2022 Erik Andersen and others\nLicense: GPL-2\n\n"
        "Files: debian/*\nCopyright: 2020 Debian\nLicense: GPL-2+\n\n"
        "License: GPL-2\n On Debian systems, the complete text of the GNU General Public License\n"
        " version 2 can be found in `/usr/share/common-licenses/GPL-2'.\n"
    ).encode()
    files = {"pkg-1.0/debian/copyright": copyright_, "pkg-1.0/debian/control": b"Source: pkg\n",
             "pkg-1.0/main.c": b"int main;\n"}  # fmt: skip
    manifest, content = manifest_of(files, {"pkg-1.0/": {}})
    found = licences(manifest, content)["components"]["pkg-1.0/"]
    assert (found["license"], found["license_file"]) == ("GPL-2.0-only", "pkg-1.0/debian/copyright")


def test_a_debian_copyright_not_in_dep5_format_says_why_it_tells_nothing() -> None:
    files = {"pkg/debian/copyright": b"This package was debianized by someone.\nIt is GPL.\n"}
    manifest, content = manifest_of(files, {"pkg/": {}})
    found = licences(manifest, content)["components"]["pkg/"]
    assert found["license"] is None
    why = "debian/copyright: not in the machine-readable format (no Format: field)"
    assert found["license_reason"] == why


def test_an_unknown_licence_says_why_and_is_a_review_flag_but_loose_files_are_not() -> None:
    files = {"README": b"router firmware\n", "tool/main.c": b"int main;\n", "tool/COPYING": b"Be nice.\n"}
    manifest, content = manifest_of(files, {"": {}, "tool/": {}})
    result = licences(manifest, content)
    assert result["components"]["tool/"] == {
        "license": None,
        "license_reason": "COPYING: no licence the spdx-tags detector can tell",
    }
    assert result["components"][""]["license"] is None
    flags = [(f.kind, f.path, f.evidence) for f in result["report"].flags]
    assert flags == [("license-unknown", "tool/", "COPYING: no licence the spdx-tags detector can tell")]

    apply(manifest, result["report"])
    tool = next(c for c in manifest["components"] if c["prefix"] == "tool/")
    assert tool["license"] is None and tool["license_reason"].startswith("COPYING:")


def test_no_licence_file_at_all_is_said_so() -> None:
    manifest, content = manifest_of({"blob/x.c": b"int x;\n"}, {"blob/": {}})
    reason = licences(manifest, content)["components"]["blob/"]["license_reason"]
    assert reason == "no COPYING, LICENSE, Licenses/README, REUSE LICENSES/ or debian/copyright at blob/"


# ------------------------------------------------------------------ the release's licence
UP_COPYING = b"SPDX-License-Identifier: GPL-2.0-only\n\nGNU GENERAL PUBLIC LICENSE Version 2\n"
RELEASE_PATHS = {"foo-1.0/COPYING": sha(UP_COPYING), "foo-1.0/main.c": sha(b"int main;\n"),
                 "foo-1.0/sub.tar.gz": "f" * 64, "foo-1.0/sub.tar.gz!/x/COPYING": "e" * 64}  # fmt: skip


def release() -> dict[str, Any]:
    sizes = {"foo-1.0/COPYING": len(UP_COPYING)}
    assert cl.release_wanted(RELEASE_PATHS, sizes) == {sha(UP_COPYING): len(UP_COPYING)}
    return cl.release_record(RELEASE_PATHS, {sha(UP_COPYING): UP_COPYING}, TAGS, sizes)


def test_a_release_s_licence_is_recorded_with_its_licence_files() -> None:
    assert release() == {
        "license": "GPL-2.0-only",
        "license_file": "COPYING",
        "license_reason": "stated by COPYING",
        "detector": "spdx-tags",
        "files": {"COPYING": {"sha256": sha(UP_COPYING), "license": "GPL-2.0-only"}},
    }


def test_an_identified_component_takes_its_release_s_licence() -> None:
    files = {"foo-1.0-acme/COPYING": UP_COPYING, "foo-1.0-acme/main.c": b"int main;\n"}
    manifest, content = manifest_of(files, {"foo-1.0-acme/": {"package": "foo", "version": "1.0"}})
    result = licences(manifest, content, {"foo-1.0-acme/": release()})
    assert result["components"]["foo-1.0-acme/"] == {
        "license": "GPL-2.0-only",
        "license_reason": "stated by COPYING of foo 1.0, recorded when the release was ingested",
        "license_file": "foo-1.0-acme/COPYING",
        "license_source": "upstream-release",
    }
    assert result["report"].flags == []


@pytest.mark.parametrize(
    ("copying", "severity", "evidence"),
    [
        # the same licence, the text edited: a reviewer looks
        (UP_COPYING + b"Acme's additions are also under it.\n", "review", "GPL-2.0-only"),
        # another licence: the supplier cannot relicense upstream's code by editing its COPYING
        (b"SPDX-License-Identifier: MIT\n", "action-required", "MIT"),
        (b"All yours.\n", "action-required", "no licence that can be told"),
    ],
)
def test_a_copying_that_differs_from_the_release_s_is_flagged(
    copying: bytes, severity: str, evidence: str
) -> None:
    files = {"foo-1.0-acme/COPYING": copying, "foo-1.0-acme/main.c": b"int main;\n"}
    manifest, content = manifest_of(
        files, {"foo-1.0-acme/": {"package": "foo", "version": "1.0"}}, {"foo-1.0-acme/COPYING": "modified"}
    )
    result = licences(manifest, content, {"foo-1.0-acme/": release()})
    assert result["components"]["foo-1.0-acme/"]["license"] == "GPL-2.0-only"  # the release's, still
    changed = [f for f in result["report"].flags if f.kind == "license-file-changed"]
    assert [(f.path, f.severity) for f in changed] == [("foo-1.0-acme/COPYING", severity)]
    assert changed[0].evidence == f"the drop's file states {evidence}"
    assert "foo 1.0's, which states GPL-2.0-only" in changed[0].detail


def test_a_release_ingested_before_licences_were_recorded_falls_back_to_the_drop() -> None:
    files = {"foo-1.0-acme/COPYING": UP_COPYING}
    manifest, content = manifest_of(files, {"foo-1.0-acme/": {"package": "foo", "version": "1.0"}})
    found = licences(manifest, content, {"foo-1.0-acme/": None})["components"]["foo-1.0-acme/"]
    assert found["license"] == "GPL-2.0-only"
    assert found["license_source"] == "drop"
    assert "ingested before licences were recorded" in found["license_reason"]


def test_an_edited_licence_file_is_flagged_even_when_the_release_s_licence_is_unknown() -> None:
    record = cl.release_record(RELEASE_PATHS, {}, TAGS, {"foo-1.0/COPYING": len(UP_COPYING)})
    assert record["license"] is None  # its COPYING was not read: nothing it states is known
    files = {"foo-1.0-acme/COPYING": b"SPDX-License-Identifier: MIT\n"}
    manifest, content = manifest_of(files, {"foo-1.0-acme/": {"package": "foo", "version": "1.0"}})
    result = licences(manifest, content, {"foo-1.0-acme/": record})
    found = result["components"]["foo-1.0-acme/"]
    assert (found["license"], found["license_source"]) == ("MIT", "drop")
    assert found["license_reason"] == "stated by COPYING (foo 1.0 has no licence recorded at ingest)"
    [flag] = result["report"].flags
    assert (flag.kind, flag.severity) == ("license-file-changed", "action-required")
    assert flag.detail == "differs from foo 1.0's, which states no licence that can be told"


def test_u_boot_s_licenses_readme_states_the_licence_of_a_nested_component() -> None:
    # U-Boot keeps no COPYING: Licenses/README (SPDX-tagged, ScanCode reads its text: tests/e2e)
    prefix = "src/u-boot-2023.01-acme.tar.gz!/"
    top = f"{prefix}u-boot-2023.01-acme/"
    files = {
        f"{top}Licenses/README": b"SPDX-License-Identifier: GPL-2.0\n\n  U-Boot is Free Software.\n",
        f"{top}Licenses/gpl-2.0.txt": b"GNU GENERAL PUBLIC LICENSE\nVersion 2, June 1991\n",
        f"{top}Licenses/Exceptions": b"The U-Boot License Exception\n",
        f"{top}drivers/acme/acme_001.c": b"// SPDX-License-Identifier: BSD-3-Clause\nint acme;\n",
    }
    manifest, content = manifest_of(files, {prefix: {}}, {f"{top}drivers/acme/acme_001.c": "added"})
    result = licences(manifest, content)
    assert result["components"][prefix]["license"] == "GPL-2.0-only"
    assert result["components"][prefix]["license_file"] == f"{top}Licenses/README"
    [flag] = result["report"].flags
    assert (flag.kind, flag.path) == ("license-different", f"{top}drivers/acme/acme_001.c")
