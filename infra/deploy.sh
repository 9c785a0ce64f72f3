#!/usr/bin/env bash
# Build and deploy template.yaml with the AWS SAM CLI: infra/deploy.sh STACK_NAME [sam deploy options...]
set -euo pipefail
cd "$(dirname "$0")/.."
stack=${1:?usage: infra/deploy.sh STACK_NAME [options]}; shift
sam build --template-file template.yaml
sam deploy --stack-name "$stack" --capabilities CAPABILITY_IAM CAPABILITY_AUTO_EXPAND --resolve-s3 "$@"
