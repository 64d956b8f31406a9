#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Validates policies files against deploy/policies/policy.schema.json with
a real JSON Schema validator (python3-jsonschema, draft 7).

Every example policies file under deploy/ must be valid. Each file under
tests/policy/broken/ that says `# schema: invalid` must be rejected (by the
schema, or already by the YAML reader); the others are broken in ways only
sluiced sees (values, cross-policy rules), and the schema must accept them:
it must never be stricter than sluiced.

Usage: policy_schema_test.py SOURCE_DIR
"""
import glob
import json
import os
import re
import sys

import jsonschema
import yaml


class Yaml12Loader(yaml.SafeLoader):
    """Reads booleans as YAML 1.2 and sluiced do: only true and false (a key
    `on:` is the string "on", not True as in YAML 1.1)."""


Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers
            if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    list("tTfF"))


def load(path):
    with open(path, encoding="utf-8") as f:
        return yaml.load(f, Loader=Yaml12Loader)


def main():
    root = sys.argv[1]
    os.chdir(root)
    with open("deploy/policies/policy.schema.json", encoding="utf-8") as f:
        schema = json.load(f)
    jsonschema.Draft7Validator.check_schema(schema)
    validator = jsonschema.Draft7Validator(schema)
    failures = []

    examples = sorted(
        path for path in glob.glob("deploy/**/*.yaml", recursive=True)
        if re.search(r"^policies:", open(path, encoding="utf-8").read(), re.M))
    if len(examples) < 4:
        failures.append(f"expected at least 4 example files, found {examples}")
    for path in examples:
        first = open(path, encoding="utf-8").readline()
        want = os.path.relpath("deploy/policies/policy.schema.json",
                               os.path.dirname(path))
        if first.strip() != f"# yaml-language-server: $schema={want}":
            failures.append(f"{path}: the first line should be the modeline "
                            f"'# yaml-language-server: $schema={want}'")
        for error in validator.iter_errors(load(path)):
            failures.append(f"{path}: {list(error.absolute_path)}: "
                            f"{error.message}")

    broken = sorted(glob.glob("tests/policy/broken/*.yaml"))
    rejected = 0
    for path in broken:
        with open(path, "rb") as f:
            detectable = b"\n# schema: invalid\n" in f.read()
        try:
            errors = list(validator.iter_errors(load(path)))
        except (yaml.YAMLError, UnicodeDecodeError) as e:
            errors = [f"YAML: {e}"]
        if detectable and not errors:
            failures.append(f"{path}: the schema accepts it")
        if not detectable and errors:
            failures.append(f"{path}: sluiced's parser accepts it but the "
                            f"schema refuses it: {errors[0]}")
        rejected += bool(errors)
    if rejected < 10:
        failures.append(f"expected at least 10 schema-detectable broken "
                        f"files, found {rejected}")

    for failure in failures:
        print("FAIL:", failure, file=sys.stderr)
    if failures:
        return 1
    print(f"ok: {len(examples)} example files valid; {rejected} of "
          f"{len(broken)} broken files rejected by the schema")
    return 0


if __name__ == "__main__":
    sys.exit(main())
