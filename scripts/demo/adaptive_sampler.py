# SPDX-License-Identifier: Apache-2.0
"""Samples the limit and the queue for scripts/demo-adaptive.

Four times a second, appends one line to --out:
  unix_ms limit sluice_in_flight backend_workers backend_busy backend_queued
          throttle_probability
with "nan" for a value not (yet) there: the adaptive limit is read from the
series --limit-metric{dependency="..."} on sluiced's metrics endpoint and is
absent in the modes without it. Runs until killed.
"""

import argparse
import json
import math
import time
import urllib.request


def fetch(url):
    try:
        with urllib.request.urlopen(url, timeout=0.5) as r:
            return r.read().decode("utf-8", "replace")
    except OSError:
        return None


def metric(text, name, dependency):
    if text is None:
        return math.nan
    label = f'dependency="{dependency}"'
    for line in text.splitlines():
        if line.startswith(name + "{") and label in line:
            try:
                return float(line.rsplit(" ", 1)[1])
            except ValueError:
                return math.nan
    return math.nan


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice-metrics", required=True)
    ap.add_argument("--backend-stats", required=True)
    ap.add_argument("--dependency", required=True)
    ap.add_argument("--limit-metric", required=True)
    ap.add_argument("--inflight-metric", required=True)
    ap.add_argument("--throttle-metric", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--interval", type=float, default=0.25)
    args = ap.parse_args()
    with open(args.out, "a", buffering=1) as out:
        while True:
            began = time.time()
            text = fetch(args.sluice_metrics)
            stats_text = fetch(args.backend_stats)
            try:
                stats = json.loads(stats_text) if stats_text else {}
            except ValueError:
                stats = {}
            values = [
                metric(text, args.limit_metric, args.dependency),
                metric(text, args.inflight_metric, args.dependency),
                stats.get("workers", math.nan),
                stats.get("busy", math.nan),
                stats.get("queued", math.nan),
                metric(text, args.throttle_metric, args.dependency),
            ]
            out.write(" ".join([str(int(began * 1000))] +
                               [str(v) for v in values]) + "\n")
            time.sleep(max(0.0, args.interval - (time.time() - began)))


if __name__ == "__main__":
    main()
