#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# deploy/policies/policy.schema.json must be what tools/policy-schema makes
# of proto/sluice/v1/policy.proto now.
# Usage: policy_schema_sync_test.sh POLICY_SCHEMA DESCRIPTOR_SET SOURCE_DIR
set -euo pipefail

tool="$1"
descriptors="$2"
checked_in="$3/deploy/policies/policy.schema.json"
fresh="$(mktemp)"
trap 'rm -f "${fresh}"' EXIT

"${tool}" "${descriptors}" >"${fresh}"
if ! diff -u "${checked_in}" "${fresh}"; then
  echo "FAIL: deploy/policies/policy.schema.json is out of date with" \
    "proto/sluice/v1/policy.proto (the diff above is what changed)." >&2
  echo "Refresh it with: cmake --build build --target update_policy_schema" \
    "(then commit it)" >&2
  exit 1
fi
echo "ok: deploy/policies/policy.schema.json is up to date"
