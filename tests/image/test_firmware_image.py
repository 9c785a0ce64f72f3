"""The firmware image's recipe without Docker: its install steps, in a fresh virtual environment.

infra/firmware.Dockerfile installs Debian's extractors with apt-get (the packages `make firmware-tools`
installs here) and runs infra/firmware-install.sh into the image's task root; here the same script
installs into a folder with a fresh venv's interpreter, and the handler's stage is then run from that
folder alone (``python -S``, PATH as the image sets it) on the router image of ``make firmware-cases``:
every binary gets the status it gets in the project's own tests. ``make image-test``, run by .ci/run.
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
    pytest.skip("installs the firmware function in a fresh venv: make image-test", allow_module_level=True)

ROOT = project_root()

CHILD = r"""
import json, sys
sys.path[:0] = [sys.argv[1]]  # the image's task root: /var/task
import app  # the handler module, as the image's CMD names it
from pathlib import Path
from dropscan.stages.firmware_check import firmware_section
manifest = json.loads(sys.argv[4])
section = firmware_section(Path(sys.argv[2]), manifest, Path(sys.argv[3]))
print(json.dumps({"handler": callable(app.handler), "verdict": section["verdict"],
                  "blobs": [b["status"] for b in section["blobs"]],
                  "statuses": {b["path"].rsplit("!", 1)[-1]: b["status"] for b in section["binaries"]}}))
"""


def test_the_firmware_requirements_are_the_projects_own() -> None:
    """The image installs what pyproject.toml pins for dropscan.firmware, with the same lower bounds."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    lines = (ROOT / "infra" / "firmware-requirements.txt").read_text().splitlines()
    wanted = [
        line for line in lines if line and not line.startswith("#") and not line.startswith("awslambdaric")
    ]
    assert wanted and set(wanted) <= set(deps)


def test_the_dockerfile_installs_the_tools_the_tests_use_and_runs_the_install_script() -> None:
    text = (ROOT / "infra" / "firmware.Dockerfile").read_text()
    debs = re.search(r"^FIRMWARE_DEBS := (.+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert debs is not None
    assert " ".join(debs.group(1).split()) in " ".join(text.split())
    assert 'sh infra/firmware-install.sh "${LAMBDA_TASK_ROOT}"' in text
    assert 'CMD ["app.handler"]' in text and "awslambdaric" in text


def test_the_install_steps_give_a_task_root_that_checks_the_router_image(tmp_path: Path) -> None:
    from helpers.firmware_drops import firmware_drop, mips_kernel_config
    from helpers.firmware_images import firmware_cache

    venv, task = tmp_path / "venv", tmp_path / "task"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHON": str(python)}
    subprocess.run(
        ["sh", "infra/firmware-install.sh", str(task)], cwd=ROOT, env=env, check=True, timeout=1800
    )
    assert (task / "bin" / "jefferson").is_file() and (task / "bin" / "ubireader_extract_files").is_file()

    drop = firmware_drop(tmp_path / "drop.tar.gz", "busybox-1.35.0", mips_kernel_config())
    components = [
        {"prefix": "busybox-1.35.0/", "package": "busybox", "version": "1.35.0", "license": "GPL-2.0-only"},
        {"prefix": "linux-6.1.176/", "package": "linux", "version": "6.1.176", "license": "GPL-2.0-only"},
    ]
    image = firmware_cache() / "images" / "router.bin"
    # the image's PATH: its own bin (the Python extractors' commands), then the system's tools
    run_env = {"PATH": f"{task / 'bin'}:/usr/bin:/bin:/usr/sbin:/sbin", "HOME": "/nonexistent"}
    done = subprocess.run(
        [
            str(python),
            "-S",
            "-B",
            "-c",
            CHILD,
            str(task),
            str(image),
            str(drop),
            json.dumps({"components": components}),
        ],
        env=run_env,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["handler"]
    assert "unreadable" not in got["blobs"]
    assert got["statuses"]["/bin/busybox"] == "corresponds"
    assert got["statuses"]["/usr/sbin/xtables-legacy-multi"] == "source-missing"
    assert got["verdict"] == "incomplete"
