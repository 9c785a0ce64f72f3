"""The triage image's recipe without Docker: its install steps, in a fresh virtual environment.

infra/triage.Dockerfile runs infra/triage-install.sh into the image's task root; here the same script
installs into a folder with a fresh venv's interpreter, and the handler is then imported from that
folder alone (``python -S``), ScanCode finding a licence with the index the install built, as a cold
start in the image would. About five minutes (ScanCode and its index): ``make image-test``, run by
.ci/run; skipped, saying so, elsewhere.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from dropscan.local.deploy import project_root

if os.environ.get("DROPSCAN_IMAGE_TEST") != "1":
    pytest.skip("installs ScanCode in a fresh venv (about 5 min): make image-test", allow_module_level=True)

ROOT = project_root()
GPL_HEADER = """/*
 * This program is free software; you can redistribute it and/or modify
 * it under the terms of the GNU General Public License as published by
 * the Free Software Foundation; either version 2 of the License, or
 * (at your option) any later version.
 */
int main(void) { return 0; }
"""

CHILD = r"""
import json, os, sys
sys.path[:0] = [sys.argv[1]]  # the image's task root: /var/task
import app  # the handler module, as the image's CMD names it
from dropscan.audit.licenses import detector
from dropscan.archive import binding
found = detector("scancode").detect(sys.stdin.read())
with open("/proc/self/maps") as maps:
    paths = {line.split()[-1] for line in maps}
mapped = sorted(p for p in paths if p.rsplit("/", 1)[-1].startswith("libarchive-"))
print(json.dumps({"handler": callable(app.handler), "found": [f.expression for f in found],
                  "sources": [f.source for f in found], "libarchive": mapped}))
"""


def test_the_image_requirements_are_the_triage_extra() -> None:
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["triage"]
    lines = (ROOT / "infra" / "triage-requirements.txt").read_text().splitlines()
    assert [line for line in lines if line and not line.startswith("#")] == extra


def test_the_dockerfile_runs_the_install_script_it_copies() -> None:
    text = (ROOT / "infra" / "triage.Dockerfile").read_text()
    assert re.search(r"^FROM public\.ecr\.aws/lambda/python:3\.11$", text, re.MULTILINE)
    assert 'sh infra/triage-install.sh "${LAMBDA_TASK_ROOT}"' in text
    assert 'CMD ["app.handler"]' in text


def test_the_install_steps_give_a_task_root_that_finds_licences_with_a_prebuilt_index(tmp_path: Path) -> None:
    venv, task = tmp_path / "venv", tmp_path / "task"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHON": str(python)}
    env["SCANCODE_CACHE"] = str(tmp_path / "build-cache")
    subprocess.run(["sh", "infra/triage-install.sh", str(task)], cwd=ROOT, env=env, check=True, timeout=1800)
    [index] = task.glob("licensedcode/data/cache/license_index/index_cache")
    built = index.stat().st_mtime_ns

    # a cold start: a fresh /tmp for ScanCode's own cache, HOME unwritable as on Lambda
    run_env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "SCANCODE_CACHE": str(tmp_path / "tmp-cache")}
    run_env["SCANCODE_TEMP"] = str(tmp_path / "tmp-temp")
    done = subprocess.run(
        [str(python), "-S", "-B", "-c", CHILD, str(task)],
        input=GPL_HEADER,
        env=run_env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["handler"]
    assert "GPL-2.0-or-later" in got["found"] and "scancode" in got["sources"]
    # dropscan's libarchive is the bundled one (auditwheel's hashed name); ScanCode's extractcode may map
    # its own 3.5.1 beside it, which dropscan never calls
    assert [p for p in got["libarchive"] if p.startswith(str(task / "archi.libs"))]
    assert index.stat().st_mtime_ns == built  # loaded, not rebuilt
