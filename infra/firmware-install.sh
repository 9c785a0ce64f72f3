#!/bin/sh
# The firmware image's Python install steps, run by infra/firmware.Dockerfile and by tests/image (in a
# fresh virtual environment):
#   infra/firmware-install.sh TARGET   (run from the repository root; PYTHON names the interpreter)
# installs the layer's requirements and the firmware ones into TARGET (its console scripts, jefferson
# and ubireader_extract_files, into TARGET/bin), and copies the dropscan package and the firmware
# handler beside them (Lambda's task root layout). Debian's tools come from the Dockerfile's apt-get.
set -eu
target=${1:?usage: infra/firmware-install.sh TARGET}
python=${PYTHON:-python3}
"$python" -m pip install --no-cache-dir --disable-pip-version-check --quiet --target "$target" \
  -r shared/requirements.txt -r infra/firmware-requirements.txt
cp -R shared/dropscan "$target/dropscan"
cp functions/firmware/app.py "$target/app.py"
