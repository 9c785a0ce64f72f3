"""Run in a fresh ``python -S -B`` process, as Lambda's runtime would: only the artefacts on sys.path.

    python -S -B lambda_child.py FUNCTION_DIR LAYER_DIR [event.json]

Imports ``app.handler`` from FUNCTION_DIR with LAYER_DIR (the layer's ``python/``) behind it, as
/var/task and /opt/python are; calls it with the event when one is given. Prints one JSON object: the
import time, the libarchive files mapped into the process, every module loaded from outside the
artefacts and the standard library, and the handler's result. Standard library only until the import.
"""

import json
import sys
import sysconfig
import time
from pathlib import Path


def main() -> None:
    function_dir, layer_dir = sys.argv[1], sys.argv[2]
    sys.path[:0] = [function_dir, layer_dir]  # Lambda: /var/task, then /opt/python
    started = time.perf_counter()
    import app  # type: ignore[import-not-found]  # the import under test

    handler = app.handler
    imported_s = time.perf_counter() - started
    result = None
    if len(sys.argv) > 3:
        result = handler(json.loads(Path(sys.argv[3]).read_text()), Context())
    artefacts = (str(Path(function_dir).resolve()), str(Path(layer_dir).resolve()))
    stdlib = sysconfig.get_paths()["stdlib"]

    def inside(path: str) -> bool:
        real = str(Path(path).resolve())
        return real.startswith(artefacts) or (real.startswith(stdlib) and "site-packages" not in real)

    files = {name: getattr(module, "__file__", None) for name, module in list(sys.modules.items())}
    runner = ("__main__", "__mp_main__")  # this script itself
    outside = sorted(name for name, path in files.items() if path and name not in runner and not inside(path))
    with open("/proc/self/maps") as maps:
        mapped = sorted({line.split()[-1] for line in maps if "libarchive" in line.rsplit("/", 1)[-1]})
    out = {"import_s": imported_s, "libarchive": mapped, "outside": outside, "result": result}
    print(json.dumps(out))


class Context:
    """What the Lambda runtime passes as ``context`` (the attributes Powertools reads)."""

    function_name = "packaged"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:packaged"
    memory_limit_in_mb = 1024
    aws_request_id = "packaged-1"
    log_group_name = "/aws/lambda/packaged"
    log_stream_name = "packaged"

    def get_remaining_time_in_millis(self) -> int:
        return 600_000


if __name__ == "__main__":
    main()
