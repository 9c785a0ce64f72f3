#!/bin/sh
# The triage image's install steps, run by infra/triage.Dockerfile and by tests/image (in a fresh venv):
#   infra/triage-install.sh TARGET   (run from the repository root; PYTHON names the interpreter)
# installs the layer's requirements and ScanCode into TARGET, copies the dropscan package and the triage
# handler beside them (Lambda's task root layout), and builds ScanCode's licence index there, so that a
# cold start loads it (about 10 s) instead of building it (another 10 s or more, on every cold start).
set -eu
target=${1:?usage: infra/triage-install.sh TARGET}
python=${PYTHON:-python3}
"$python" -m pip install --no-cache-dir --disable-pip-version-check --quiet --target "$target" \
  -r shared/requirements.txt -r infra/triage-requirements.txt
cp -R shared/dropscan "$target/dropscan"
cp functions/triage/app.py "$target/app.py"
# the index lands in the installed licensedcode/data/cache (package data, read-only at run time)
SCANCODE_CACHE=${SCANCODE_CACHE:-/tmp/scancode-cache} PYTHONPATH="$target" "$python" -c \
  "from licensedcode.cache import get_index; get_index()"
