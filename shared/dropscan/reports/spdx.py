"""The SPDX 2.3 JSON document of a scan (spdx-tools), written in parts: one package per component, its
files and licences (the elements: :mod:`dropscan.reports.spdx_elements`).

SPDX 2.3 requires a SHA-1 checksum on every File (clause 8.4: "Required: Yes, Cardinality 1..1 SHA1"),
and spdx-tools' validator enforces it. A manifest's files carry SHA-256 and, when the unpack stage records
it, ``sha1``. A component whose files all have a SHA-1 is written with ``filesAnalyzed: true``, each file
with both checksums, its licence findings and a package verification code; a component with any file
lacking one is written with ``filesAnalyzed: false`` and no File elements (a comment says why): the
file-level evidence then lives in manifest.json and the CycloneDX SBOM only. Nothing is made up.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any, TypeAlias

from spdx_tools.spdx.jsonschema import converter as _json_converter
from spdx_tools.spdx.jsonschema.annotation_converter import AnnotationConverter
from spdx_tools.spdx.jsonschema.document_converter import DocumentConverter
from spdx_tools.spdx.jsonschema.document_properties import DocumentProperty
from spdx_tools.spdx.jsonschema.relationship_converter import RelationshipConverter
from spdx_tools.spdx.model.annotation import Annotation
from spdx_tools.spdx.writer.write_utils import convert

from dropscan.forked import Done, Forked
from dropscan.reports.spdx_elements import Entry, Layout, file_comment, file_types, layout_of, with_files

# spdx-tools' JSON converter turns each property name from snake_case into camelCase with a regex, once
# per property of every element; there are a few dozen names and the function is pure, so it is memoised
# (figures in docs/design.md).
_camel_case = _json_converter.snake_case_to_camel_case  # type: ignore[attr-defined]
if not hasattr(_camel_case, "cache_info"):
    _json_converter.snake_case_to_camel_case = cache(_camel_case)  # type: ignore[attr-defined]


def render(manifest: Mapping[str, Any]) -> str:
    with Rendering(manifest) as rendering:
        return rendering.text()


class Rendering:
    """The SPDX document of ``manifest``, its File elements made in ``parts`` children forked now (1: here).

    At 80,000 files those elements and their relationships are nearly all the work (5 s of a kernel
    drop's), and they are independent of one another; the caller renders its other reports meanwhile.

    What spdx-tools' write_document_to_stream does, less three costs that matter at 80,000 files: its
    validation is quadratic (it lists every SPDX id for each reference: the tests validate instead); so
    is its placing of annotations (each file looks through all of them: 26 million calls and two minutes
    for a kernel drop with 328 flags), done here by SPDX id; and its indent of 4 makes a kernel's
    document 68 MB instead of 40 MB.
    """

    def __init__(self, manifest: Mapping[str, Any], parts: int = 1) -> None:
        layout = layout_of(manifest)
        # placed by SPDX id, not by each element's converter looking through all of them
        annotations, layout.document.annotations = layout.document.annotations, []
        self._layout = layout
        entries = layout.entries
        file_ids = {e.spdx_id for e in entries}
        on_files: dict[str, list[Annotation]] = {}
        for a in annotations:
            if a.spdx_id in file_ids:
                on_files.setdefault(a.spdx_id, []).append(a)
        self._annotations = [a for a in annotations if a.spdx_id not in file_ids]
        self._parts: list[Forked[_Elements] | Done[_Elements]] = []
        if parts < 2 or len(entries) < 2:
            self._parts.append(Done(_elements(layout, entries, on_files)))
            return
        size = -(-len(entries) // parts)
        for i in range(0, len(entries), size):
            self._parts.append(Forked(_elements, layout, entries[i : i + size], on_files))

    def __enter__(self) -> Rendering:
        return self

    def __exit__(self, *exc: object) -> None:
        for part in self._parts:
            part.__exit__(*exc)  # a part never asked for is stopped

    def text(self) -> str:
        """The document, as ``json.dumps(..., separators=(",", ":"), ensure_ascii=False)`` writes it."""
        files: list[str] = []
        contains: dict[str, list[str]] = {}
        for part in self._parts:
            made, related = part.result()
            if made:
                files.append(made)
            for package, text in related:
                contains.setdefault(package, []).append(text)
        converter = DocumentConverter()  # type: ignore[no-untyped-call]
        out = convert(self._layout.document, converter)  # type: ignore[no-untyped-call]
        head = out["relationships"]  # DESCRIBES, then the drop's CONTAINS of each package, in order
        converted = set(out)
        _attach(out, self._annotations)
        relationships = with_files(self._layout, [_dumps(rel) for rel in head], contains)
        texts = {k: _dumps(v) for k, v in out.items()}
        if files:
            texts["files"] = "[" + ",".join(files) + "]"
        as_json = RelationshipConverter()  # type: ignore[no-untyped-call]
        relationships += [_dumps(as_json.convert(rel)) for rel in self._layout.derived]
        texts["relationships"] = "[" + ",".join(relationships) + "]"
        # in the order spdx-tools writes a whole document's properties, then what _attach added
        order = [converter.json_property_name(p) for p in DocumentProperty]
        keys = [k for k in order if k in texts and (k in converted or k == "files")]
        keys += [k for k in out if k not in converted]
        return "{" + ",".join(f"{_dumps(k)}:{texts[k]}" for k in keys) + "}"


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


#: the JSON of some File elements (comma-separated), and of their packages' CONTAINS relationships to
#: them (comma-separated, per package): text, which comes back from a child faster than the dicts
_Elements: TypeAlias = tuple[str, list[tuple[str, str]]]


def _elements(
    layout: Layout, entries: Sequence[Entry], annotations: Mapping[str, list[Annotation]]
) -> _Elements:
    """The File elements and CONTAINS relationships of ``entries`` as spdx-tools' converters write them,
    made as dicts here: the converters cost 0.3 ms an element (property by property, with type checks),
    40 s for 120,000 files; the tests check the document is the same, byte for byte."""
    annotation_converter = AnnotationConverter()  # type: ignore[no-untyped-call]
    made = []
    for e in entries:
        element = _file_json(e)
        if e.spdx_id in annotations:
            element["annotations"] = [annotation_converter.convert(a) for a in annotations[e.spdx_id]]
        made.append(element)
    related = []
    for package, group in itertools.groupby(entries, key=lambda e: e.package):
        rels = [
            {"spdxElementId": package, "relatedSpdxElement": e.spdx_id, "relationshipType": "CONTAINS"}
            for e in group
        ]
        related.append((package, _dumps(rels)[1:-1]))
    return _dumps(made)[1:-1], related


def _file_json(e: Entry) -> dict[str, Any]:
    """``FileConverter().convert(_file(e))``: the same keys in the same order, None left out."""
    f = e.file
    out: dict[str, Any] = {
        "SPDXID": e.spdx_id,
        "checksums": [
            {"algorithm": "SHA1", "checksumValue": str(f["sha1"])},
            {"algorithm": "SHA256", "checksumValue": str(f["sha256"])},
        ],
        "comment": file_comment(f),
        "fileName": f"./{f['path']}",
        "fileTypes": [t.name for t in file_types(f)],
    }
    if e.licences:
        out["licenseInfoInFiles"] = [str(x) for x in e.licences]
    return out


def _attach(out: dict[str, Any], annotations: Sequence[Annotation]) -> None:
    """Each annotation under the element it is about, as spdx-tools' converter places them."""
    elements = {e["SPDXID"]: e for kind in ("files", "packages", "snippets") for e in out.get(kind) or ()}
    converter = AnnotationConverter()  # type: ignore[no-untyped-call]
    for annotation in annotations:
        element = elements.get(annotation.spdx_id, out)
        element.setdefault("annotations", []).append(converter.convert(annotation))
