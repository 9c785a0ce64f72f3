#!/usr/bin/env bash
# Build and deploy template.yaml with the AWS SAM CLI (infra/README.md is the runbook):
#   infra/deploy.sh STACK_NAME [sam deploy options...]
# e.g. infra/deploy.sh dropscan --parameter-overrides TriageDetector=tags NotifyEmail=you@example.com
# With TriageDetector=tags (or auto) the triage image is not built (no Docker needed); otherwise sam build needs
# Docker or Finch for it and sam deploy pushes it to a managed ECR repository.
set -euo pipefail
cd "$(dirname "$0")/.."
stack=${1:?usage: infra/deploy.sh STACK_NAME [sam deploy options...]}; shift
if [[ " $* " == *" TriageDetector=tags "* || " $* " == *" TriageDetector=auto "* ]]; then
  sam build --template-file template.yaml --exclude TriageImageFunction
else
  sam build --template-file template.yaml
fi
sam deploy --stack-name "$stack" --capabilities CAPABILITY_IAM CAPABILITY_AUTO_EXPAND \
  --resolve-s3 --resolve-image-repos "$@"
