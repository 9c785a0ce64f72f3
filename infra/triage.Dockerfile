# The triage function with ScanCode Toolkit (template.yaml: TriageImageFunction, TriageDetector=scancode).
# Built by `sam build` from the repository root (DockerContext: .); its install steps are
# infra/triage-install.sh, which `make image-test` also runs in a fresh virtual environment.
FROM public.ecr.aws/lambda/python:3.11

# Lambda's file system is read-only but for /tmp: ScanCode's caches and scratch files go there; its licence
# index is built below, into the image
ENV SCANCODE_CACHE=/tmp/scancode-cache \
    SCANCODE_TEMP=/tmp/scancode-temp

WORKDIR /build
COPY shared/requirements.txt shared/requirements.txt
COPY infra/triage-requirements.txt infra/triage-install.sh infra/
COPY shared/dropscan shared/dropscan
COPY functions/triage/app.py functions/triage/app.py
RUN PYTHON=python3.11 sh infra/triage-install.sh "${LAMBDA_TASK_ROOT}" \
    && rm -rf /build /tmp/scancode-cache

WORKDIR ${LAMBDA_TASK_ROOT}
CMD ["app.handler"]
