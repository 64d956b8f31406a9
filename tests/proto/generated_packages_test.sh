#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The go_package and java_package options of proto/sluice/v1/*.proto: protoc
# with protoc-gen-go (Debian's golang-goprotobuf-dev) and --java_out puts
# each file's code where its options say, in the package they name.
# Usage: generated_packages_test.sh PROTOC SOURCE_DIR
set -euo pipefail

protoc="$1"
proto_root="$2/proto"
out="$(mktemp -d)"
trap 'rm -rf "${out}"' EXIT
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

if ! command -v protoc-gen-go >/dev/null; then
  echo "FAIL: protoc-gen-go is not installed (scripts/setup installs" \
    "golang-goprotobuf-dev)" >&2
  exit 1
fi

# option NAME = "VALUE"; of one file, or "" when it has none.
option() {
  sed -n "s/^option $2 = \"\\(.*\\)\";\$/\\1/p" "$1"
}

cd "${proto_root}"
files=(sluice/v1/*.proto)
mkdir -p "${out}/go" "${out}/java"
"${protoc}" --proto_path=. --go_out="${out}/go" --java_out="${out}/java" \
  "${files[@]}"

for f in "${files[@]}"; do
  name="$(basename "${f}" .proto)"
  go_package="$(option "${f}" go_package)"
  java_package="$(option "${f}" java_package)"
  outer="$(option "${f}" java_outer_classname)"
  if [[ -z ${go_package} || -z ${java_package} || -z ${outer} ]] ||
      ! grep -q '^option java_multiple_files = true;$' "${f}"; then
    fail "${f}: needs go_package, java_package, java_outer_classname and" \
      "java_multiple_files = true"
    continue
  fi
  # Every sluice.v1 file is one Go package and one Java package.
  [[ ${go_package} == "$(option sluice/v1/policy.proto go_package)" ]] ||
    fail "${f}: go_package ${go_package} differs from policy.proto's"
  [[ ${java_package} == "$(option sluice/v1/policy.proto java_package)" ]] ||
    fail "${f}: java_package ${java_package} differs from policy.proto's"

  go_file="${out}/go/${go_package%%;*}/${name}.pb.go"
  if [[ ! -f ${go_file} ]]; then
    fail "${f}: expected ${go_file#"${out}/"}"
  elif ! grep -q "^package ${go_package#*;}\$" "${go_file}"; then
    fail "${go_file#"${out}/"}: expected 'package ${go_package#*;}'"
  fi

  java_dir="${out}/java/${java_package//.//}"
  java_file="${java_dir}/${outer}.java"
  if [[ ! -f ${java_file} ]]; then
    fail "${f}: expected ${java_file#"${out}/"}"
  elif ! grep -q "^package ${java_package};\$" "${java_file}"; then
    fail "${java_file#"${out}/"}: expected 'package ${java_package};'"
  fi
  # java_multiple_files: each top-level message in a file of its own.
  while read -r message; do
    [[ -f ${java_dir}/${message}.java ]] ||
      fail "${f}: message ${message}: expected ${java_dir#"${out}/"}/${message}.java"
  done < <(sed -n 's/^message \([A-Za-z0-9_]*\) {.*/\1/p' "${f}")
done

# Nothing anywhere else: the options are the only places.
go_dir="$(option sluice/v1/policy.proto go_package)"
java_dir="$(option sluice/v1/policy.proto java_package)"
stray="$(find "${out}/go" "${out}/java" -type f |
  grep -v -F -e "${out}/go/${go_dir%%;*}/" -e "${out}/java/${java_dir//.//}/" ||
  true)"
[[ -z ${stray} ]] || fail "files outside the packages the options name: ${stray}"

if ((failures > 0)); then
  echo "${failures} failure(s)" >&2
  exit 1
fi
echo "ok: ${#files[@]} files generate Go and Java code where their options say"
