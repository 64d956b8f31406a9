#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `sluiced --check` against the repository's policies files: every example
# file passes; every file under tests/policy/broken fails with exit 1 and
# the FILE:LINE its `# expect: LINE: text` comments name (one error a
# comment); hostile files are refused cleanly; --check refuses serving flags.
# Usage: check_policies_test.sh SLUICED SOURCE_DIR
set -euo pipefail

sluiced="$1"
root="$2"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# Runs sluiced --check ARGS...; sets rc, out, err. A hang is a failure too.
check() {
  rc=0
  timeout -s KILL 60 "${sluiced}" --check "$@" >"${work}/out" 2>"${work}/err" ||
    rc=$?
  out="$(cat "${work}/out")"
  err="$(cat "${work}/err")"
}

cd "${root}"

# The example files: every YAML file under deploy/ that is a policies file.
mapfile -t examples < <(grep -rl --include='*.yaml' '^policies:' deploy | sort)
if ((${#examples[@]} < 4)); then
  fail "expected at least 4 example policies files under deploy/, found ${#examples[@]}"
fi
for f in "${examples[@]}"; do
  check "${f}"
  if [[ ${rc} != 0 || -n ${err} || ${out} != "${f}: ok, "* ]]; then
    fail "${f}: expected exit 0 and \"${f}: ok, N policies\", got exit ${rc}: ${out} ${err}"
  fi
done

# The broken files.
broken=(tests/policy/broken/*.yaml)
if ((${#broken[@]} < 10)); then
  fail "expected at least 10 broken files, found ${#broken[@]}"
fi
for f in "${broken[@]}"; do
  check "${f}"
  if [[ ${rc} != 1 ]]; then
    fail "${f}: expected exit 1, got ${rc}: ${out} ${err}"
    continue
  fi
  [[ -z ${out} ]] || fail "${f}: printed a summary for an invalid file: ${out}"
  mapfile -t expects < <(sed -n 's/^# expect: //p' "${f}")
  ((${#expects[@]} > 0)) || fail "${f}: has no '# expect: LINE: text' comment"
  errors="$(grep -c . <<<"${err}" || true)"
  if [[ ${errors} != "${#expects[@]}" ]]; then
    fail "${f}: expected ${#expects[@]} error line(s), got ${errors}: ${err}"
  fi
  for e in "${expects[@]}"; do
    line="${e%%: *}"
    text="${e#*: }"
    # FILE:LINE: or FILE:LINE:COLUMN: (YAML syntax errors), then the text.
    if ! grep -F -- "${text}" <<<"${err}" |
        grep -qE "^${f//./\\.}:${line}:([0-9]+:)? "; then
      fail "${f}: expected an error \"${f}:${line}: ...${text}...\", got: ${err}"
    fi
  done
done

# Several files at once: each judged, the valid one summarized, exit 1.
check deploy/policies/example.yaml tests/policy/broken/negative_rate.yaml
if [[ ${rc} != 1 || ${out} != "deploy/policies/example.yaml: ok, "* ||
      ${err} != "tests/policy/broken/negative_rate.yaml:9: "* ]]; then
  fail "two files: expected exit 1, one summary, one error; got ${rc}: ${out} ${err}"
fi

# Hostile files: refused with exit 1 and a message naming the file, fast
# (the 60 s timeout kills a hang), without reading a FIFO or a device.
mkfifo "${work}/fifo"
mkdir "${work}/dir"
truncate -s 17M "${work}/huge.yaml"
python3 - "${work}" <<'PY'
import sys
work = sys.argv[1]
# Nesting far deeper than any policy.
with open(f"{work}/deep.yaml", "w") as f:
    f.write("policies:\n- name: a\n  rate_limit: " + "[" * 50000 + "]" * 50000 + "\n")
with open(f"{work}/deep_maps.yaml", "w") as f:
    f.write("policies:\n- name: a\n  rate_limit: " + "{a: " * 20000 + "1" + "}" * 20000 + "\n")
# Aliases of aliases: a few hundred kilobytes that expand to 10^10 values.
n = 100000
with open(f"{work}/laughs.yaml", "w") as f:
    f.write("policies:\n- name: a\n  per_key: true\n  envoy_descriptors:\n")
    f.write("  - &d {domain: x, entries: [&e {key: k, value: v}, " +
            ", ".join(["*e"] * n) + "]}\n")
    f.write("".join("  - *d\n" for _ in range(n)))
PY
for f in "${work}/fifo" "${work}/dir" /dev/zero "${work}/huge.yaml" \
    "${work}/deep.yaml" "${work}/deep_maps.yaml" "${work}/laughs.yaml" \
    "${work}/missing.yaml"; do
  check "${f}"
  if [[ ${rc} != 1 || ${err} != "${f}:"* || -n ${out} ]]; then
    fail "${f}: expected exit 1 and an error naming the file, got ${rc}: ${out} ${err}"
  fi
done

# --check serves nothing, so it takes no serving flag.
for args in "--listen 127.0.0.1:0 --check deploy/policies/example.yaml" \
    "--check deploy/policies/example.yaml --policies deploy/policies/example.yaml" \
    "--check deploy/policies/example.yaml --redis 127.0.0.1:6379" \
    "--check"; do
  rc=0
  # shellcheck disable=SC2086  # the words are the arguments
  timeout -s KILL 60 "${sluiced}" ${args} >"${work}/out" 2>"${work}/err" || rc=$?
  if [[ ${rc} != 2 ]]; then
    fail "sluiced ${args}: expected exit 2, got ${rc}: $(cat "${work}/err")"
  fi
done
if ! grep -q "give the file to --check" <(timeout -s KILL 60 "${sluiced}" \
    --check deploy/policies/example.yaml --policies x 2>&1); then
  fail "--check with --policies: the usage error should say to give the file to --check"
fi

if ((failures > 0)); then
  echo "${failures} failure(s)" >&2
  exit 1
fi
echo "ok: ${#examples[@]} example files valid, ${#broken[@]} broken files refused at their lines, hostile files refused"
