#!/usr/bin/env bash
# Build and deploy template.yaml with the AWS SAM CLI (infra/README.md is the runbook):
#   infra/deploy.sh STACK_NAME [sam deploy options...]
# e.g. infra/deploy.sh dropscan --parameter-overrides TriageDetector=tags NotifyEmail=you@example.com
# With TriageDetector=tags (or auto) the triage image is not built, with FirmwarePackage=zip the firmware one
# (no Docker needed for either); otherwise sam build needs Docker or Finch for them and sam deploy pushes them
# to managed ECR repositories.
set -euo pipefail
cd "$(dirname "$0")/.."
stack=${1:?usage: infra/deploy.sh STACK_NAME [sam deploy options...]}; shift
# an image is built only when its form is deployed: triage's with ScanCode, firmware's with its extractors
exclude=()
if [[ " $* " == *" TriageDetector=tags "* || " $* " == *" TriageDetector=auto "* ]]; then
  exclude+=(--exclude TriageImageFunction)
fi
if [[ " $* " == *" FirmwarePackage=zip "* ]]; then
  exclude+=(--exclude FirmwareImageFunction)
fi
sam build --template-file template.yaml "${exclude[@]}"
sam deploy --stack-name "$stack" --capabilities CAPABILITY_IAM CAPABILITY_AUTO_EXPAND \
  --resolve-s3 --resolve-image-repos "$@"
