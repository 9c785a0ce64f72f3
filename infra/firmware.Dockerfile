# The firmware function with its extractors (template.yaml: FirmwareImageFunction, FirmwarePackage=image).
# Built by `sam build` from the repository root (DockerContext: .). Debian's tools do not load on the
# Lambda base image's glibc, so the base is Debian's own Python with AWS's runtime interface client
# (awslambdaric, in infra/firmware-requirements.txt); the Python install steps are
# infra/firmware-install.sh, which `make image-test` also runs in a fresh virtual environment.
FROM public.ecr.aws/docker/library/python:3.11-slim-bookworm

# the same Debian packages `make firmware-tools` installs where the tests run (Makefile: FIRMWARE_DEBS);
# not pinned: bookworm's archive keeps only the current (security-updated) version of each
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
       squashfs-tools u-boot-tools mtd-utils e2fsprogs cpio util-linux lz4 zstd \
    && rm -rf /var/lib/apt/lists/*

ENV LAMBDA_TASK_ROOT=/var/task
# jefferson and ubireader_extract_files, installed beside the packages
ENV PATH=/var/task/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
    PYTHONPATH=/var/task

WORKDIR /build
COPY shared/requirements.txt shared/requirements.txt
COPY infra/firmware-requirements.txt infra/firmware-install.sh infra/
COPY shared/dropscan shared/dropscan
COPY functions/firmware/app.py functions/firmware/app.py
RUN PYTHON=python3.11 sh infra/firmware-install.sh "${LAMBDA_TASK_ROOT}" && rm -rf /build

WORKDIR ${LAMBDA_TASK_ROOT}
ENTRYPOINT ["python3.11", "-m", "awslambdaric"]
CMD ["app.handler"]
