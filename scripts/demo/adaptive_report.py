# SPDX-License-Identifier: Apache-2.0
"""Tables and goals for scripts/demo-adaptive.

Reads the work directory the script filled: params.env, and per mode
MODE/params.env, MODE/requests.csv (one line per request, from
sluice-example-loadgen) and MODE/samples.txt (adaptive_sampler.py). Prints a
table per phase and mode and the goals for adaptive, optionally writes
docs/experiments/adaptive.md and its PNG, and exits 1 when a goal is missed.

Definitions (all from the load generator's view, times in its clock):
  good answer   a 2xx from the backend (not a degraded fallback), received
                within the client's timeout; its latency counts from the
                request's scheduled send time
  capacity      workers x 1000 / service_ms requests a second, following the
                backend's workers over time
  goodput       good answers / sum over the phase's seconds of
                min(offered that second, capacity that second)
  uncongested   the p99 of good answers in the warmup phase (0.5x capacity),
                its first second left out (connections opening)
  5xx           gateway 5xx that are not Sluice refusals (502: the backend
                failed or was too slow), timeouts and connection errors
  converged     in a phase, the first second from which, to the end of the
                phase, every second has p99 <= the p99 bound and goodput >=
                the goodput bound; "converged in ramp" counts from the
                second the offered load first exceeds capacity,
                "re-converged" from the capacity drop
Goals for adaptive: goodput >= 90% of capacity in every phase; p99 <= 2x
uncongested once converged: in hold and recover over the whole phase, in
ramp and drop from the converged second on; converged within 10 s in ramp
and after the drop; no 5xx. --short (params short=1) loosens goodput to
80% and p99 to 3x.

Usage: adaptive_report.py WORKDIR [--doc FILE.md --png FILE.png]
"""

import argparse
import datetime
import math
import os
import re
import sys

PHASES = ["warmup", "ramp", "hold", "drop", "recover"]
BAD = ("error", "other", "timeout", "conn_error")


def read_env(path):
    params = {}
    with open(path) as f:
        for line in f:
            key, _, value = line.strip().partition("=")
            if key:
                params[key] = int(value) if re.fullmatch(r"-?\d+", value) \
                    else value
    return params


def read_requests(path):
    rows = []
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split(",")
            if len(parts) < 6:
                continue
            rows.append({"sched": int(parts[0]) / 1000,
                         "done": int(parts[1]) / 1000,
                         "outcome": parts[2], "status": int(parts[3]),
                         "latency_ms": int(parts[4]) / 1000,
                         "reason": parts[5]})
    return rows


def read_samples(path):
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 7:
                    rows.append([int(parts[0])] + [float(p) for p in parts[1:]])
    return rows


def percentile(values, q):
    if not values:
        return math.nan
    values = sorted(values)
    rank = max(1, math.ceil(q * len(values)))
    return values[min(rank, len(values)) - 1]


def phase_bounds(p):
    bounds, at = {}, 0
    for name in PHASES:
        length = p[f"{name}_s"]
        bounds[name] = (at, at + length)
        at += length
    return bounds


def analyse_mode(p, mode, work):
    mp = read_env(os.path.join(work, mode, "params.env"))
    reqs = read_requests(os.path.join(work, mode, "requests.csv"))
    samples = read_samples(os.path.join(work, mode, "samples.txt"))
    bounds = phase_bounds(p)
    end = bounds[PHASES[-1]][1]
    drop_t = (mp["drop_ms"] - mp["start_ms"]) / 1000
    recover_t = (mp["recover_ms"] - mp["start_ms"]) / 1000
    full = p["capacity"]
    half = p["half_workers"] * 1000 / p["service_ms"]

    def capacity_between(a, b):
        """Requests the backend can serve in [a, b)."""
        lo, hi = max(a, drop_t), min(b, recover_t)
        degraded = max(0.0, hi - lo)
        return full * (b - a - degraded) + half * degraded

    seconds = []
    for s in range(end):
        seconds.append({"offered": 0, "good": 0, "lat": [],
                        "capacity": capacity_between(s, s + 1)})
    for r in reqs:
        s = int(r["sched"])
        if 0 <= s < end:
            seconds[s]["offered"] += 1
        d = int(r["done"])
        if r["outcome"] == "ok" and 0 <= d < end:
            seconds[d]["good"] += 1
            seconds[d]["lat"].append(r["latency_ms"])
    for sec in seconds:
        sec["p99"] = percentile(sec["lat"], 0.99)
        useful = min(sec["offered"], sec["capacity"])
        sec["goodput"] = sec["good"] / useful if useful else math.nan

    w0, w1 = bounds["warmup"]
    uncongested = percentile(
        [r["latency_ms"] for r in reqs
         if r["outcome"] == "ok" and w0 + 1 <= r["done"] < w1], 0.99)

    phases = []
    for i, name in enumerate(PHASES):
        a, b = bounds[name]
        last = i == len(PHASES) - 1
        in_phase = [r for r in reqs
                    if a <= r["done"] and (last or r["done"] < b)]
        lat = [r["latency_ms"] for r in in_phase if r["outcome"] == "ok"]
        useful = sum(min(seconds[s]["offered"], seconds[s]["capacity"])
                     for s in range(a, b))
        good = sum(seconds[s]["good"] for s in range(a, b))
        phases.append({
            "name": name, "a": a, "b": b,
            "offered": sum(seconds[s]["offered"] for s in range(a, b)) / (b - a),
            "capacity": sum(seconds[s]["capacity"] for s in range(a, b)) / (b - a),
            "good": good / (b - a),
            "goodput": good / useful if useful else math.nan,
            "p50": percentile(lat, 0.50), "p99": percentile(lat, 0.99),
            "errors": sum(1 for r in in_phase if r["outcome"] in BAD),
            "timeouts": sum(1 for r in in_phase if r["outcome"] == "timeout"),
            "refused": sum(1 for r in in_phase if r["outcome"] == "refused"),
            "degraded": sum(1 for r in in_phase
                            if r["outcome"] == "degraded"),
            "reasons": sorted({r["reason"] for r in in_phase
                               if r["outcome"] in ("refused", "degraded")
                               and r["reason"]}),
        })
    return {"mode": mode, "params": mp, "seconds": seconds, "phases": phases,
            "uncongested": uncongested, "samples": samples,
            "drop_t": drop_t, "recover_t": recover_t,
            "requests": len(reqs)}


def converged(result, phase, since, p99_bound, goodput_bound, bounds):
    """Seconds from `since` to the first second of `phase` from which every
    second to the end of the phase meets both bounds (and from which its
    p99 is pooled); (None, None) if none does."""
    a, b = bounds[phase]
    secs = result["seconds"]
    first = None
    for s in range(b - 1, a - 1, -1):
        sec = secs[s]
        ok = (not math.isnan(sec["p99"]) and sec["p99"] <= p99_bound and
              not math.isnan(sec["goodput"]) and sec["goodput"] >= goodput_bound)
        if not ok:
            break
        first = s
    if first is None:
        return None, None
    return max(0.0, first - since), first


def overload_start(p):
    """When the ramp's offered load first exceeds capacity (its 0.5x..3x
    ramp crosses 1x a fifth of the way in)."""
    a, _ = phase_bounds(p)["ramp"]
    return a + p["ramp_s"] * 0.5 / 2.5


def bounds_for(p, result):
    short = p["short"] == 1
    factor = 3.0 if short else 2.0
    return factor, factor * result["uncongested"], 0.80 if short else 0.90


def check_goals(p, result):
    p99_factor, bound, goodput_bound = bounds_for(p, result)
    bounds = phase_bounds(p)
    checks = []

    def check(name, ok, detail):
        checks.append((name, bool(ok), detail))

    for ph in result["phases"]:
        check(f"goodput >= {goodput_bound:.0%} of capacity in {ph['name']}",
              ph["goodput"] >= goodput_bound, f"{ph['goodput']:.1%}")
    starts = {"ramp": (overload_start(p), "after the load first exceeds "
                       "capacity"),
              "drop": (result["drop_t"], "after the capacity drop")}
    firsts = {}
    for phase, (since, what) in starts.items():
        took, first = converged(result, phase, since, bound, goodput_bound,
                                bounds)
        firsts[phase] = first
        check(f"{'re-' if phase == 'drop' else ''}converged within 10 s {what}",
              took is not None and took <= 10,
              "never" if took is None else f"{took:.1f} s")
    for ph in result["phases"][1:]:
        if ph["name"] in firsts:
            first = firsts[ph["name"]]
            lat = [] if first is None else [
                x for s in range(first, ph["b"])
                for x in result["seconds"][s]["lat"]]
            p99 = percentile(lat, 0.99)
            where = f"{ph['name']}, once converged"
        else:
            p99, where = ph["p99"], ph["name"]
        check(f"p99 <= {p99_factor:g}x uncongested ({bound:.1f} ms) in {where}",
              not math.isnan(p99) and p99 <= bound, f"{p99:.1f} ms")
    errors = sum(ph["errors"] for ph in result["phases"])
    check("no 5xx (errors, timeouts, connection errors)", errors == 0,
          f"{errors} of {result['requests']}")
    return checks


def fmt(x, spec):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) \
        else format(x, spec)


def table(results):
    head = ("| mode | phase | offered/s | capacity/s | good/s | goodput | "
            "p50 ms | p99 ms | 5xx | refused | degraded |")
    lines = [head, "|" + "---|" * 11]
    for res in results:
        for ph in res["phases"]:
            lines.append(
                f"| {res['mode']} | {ph['name']} | {ph['offered']:.0f} | "
                f"{ph['capacity']:.0f} | {ph['good']:.0f} | "
                f"{fmt(ph['goodput'] * 100, '.1f')}% | {fmt(ph['p50'], '.1f')} | "
                f"{fmt(ph['p99'], '.1f')} | {ph['errors']} | {ph['refused']} | "
                f"{ph['degraded']} |")
    return "\n".join(lines)


def summary(results, conv_by_mode):
    lines = ["| mode | uncongested p99 ms | converged in ramp | "
             "re-converged after drop | refusal/degrade reasons |",
             "|---|---|---|---|---|"]
    for res in results:
        ramp, drop = conv_by_mode.get(res["mode"])
        reasons = sorted({r for ph in res["phases"] for r in ph["reasons"]})
        lines.append(f"| {res['mode']} | {fmt(res['uncongested'], '.1f')} | "
                     f"{'never' if ramp is None else f'{ramp:.1f} s'} | "
                     f"{'never' if drop is None else f'{drop:.1f} s'} | "
                     f"{', '.join(reasons) or '-'} |")
    return "\n".join(lines)


def plot(p, results, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    colors = {"none": "tab:red", "static": "tab:orange",
              "adaptive": "tab:green"}
    fig, axes = plt.subplots(3, 1, figsize=(11, 10), sharex=True)
    adaptive = next((r for r in results if r["mode"] == "adaptive"), None)
    ax = axes[0]
    if adaptive is not None and adaptive["samples"]:
        t0 = adaptive["params"]["start_ms"]
        xs = [(s[0] - t0) / 1000 for s in adaptive["samples"]]
        ax.step(xs, [s[1] for s in adaptive["samples"]], where="post",
                label="adaptive limit", color="tab:green", linewidth=1.8)
        ax.plot(xs, [s[2] for s in adaptive["samples"]],
                label="in flight at Sluice", color="tab:blue", linewidth=1)
        ax.plot(xs, [s[4] + s[5] for s in adaptive["samples"]],
                label="at the backend (busy + queued)", color="tab:purple",
                linewidth=1, alpha=0.7)
        ax.step(xs, [s[3] for s in adaptive["samples"]], where="post",
                label="capacity (workers)", color="black", linestyle="--",
                linewidth=1.2)
    ax.set_ylabel("concurrent calls")
    ax.set_title("adaptive mode: the limit, in-flight and capacity",
                 fontsize=10)
    ax.set_ylim(0, ax.get_ylim()[1] * 1.35)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, 0.93), ncol=4,
              fontsize=8)
    ax.grid(alpha=0.3)

    ax = axes[1]
    for res in results:
        secs = res["seconds"]
        ax.plot([s + 0.5 for s in range(len(secs))],
                [sec["good"] for sec in secs], label=f"good/s, {res['mode']}",
                color=colors.get(res["mode"]), linewidth=1.3)
    if results:
        secs = results[0]["seconds"]
        ax.plot([s + 0.5 for s in range(len(secs))],
                [sec["capacity"] for sec in secs], label="capacity/s",
                color="black", linestyle="--", linewidth=1)
        ax.plot([s + 0.5 for s in range(len(secs))],
                [sec["offered"] for sec in secs], label="offered/s",
                color="grey", linestyle=":", linewidth=1)
    ax.set_ylabel("requests per second")
    ax.set_title("good answers per second, each mode", fontsize=10)
    ax.legend(loc="center right", fontsize=8)
    ax.grid(alpha=0.3)

    ax = axes[2]
    for res in results:
        secs = res["seconds"]
        ax.plot([s + 0.5 for s in range(len(secs))],
                [sec["p99"] for sec in secs], label=f"p99, {res['mode']}",
                color=colors.get(res["mode"]), linewidth=1.3)
    if adaptive is not None and not math.isnan(adaptive["uncongested"]):
        factor, bound, _ = bounds_for(p, adaptive)
        ax.axhline(bound, color="tab:green", linestyle="--", linewidth=0.8,
                   label=f"{factor:g}x uncongested (adaptive)")
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_yticks([10, 20, 50, 100, 200, 500, 1000, 2000])
    ax.set_title("p99 of good answers per second, each mode", fontsize=10)
    ax.set_ylabel("ms (log scale)")
    ax.set_xlabel("seconds since the load started")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, 0.93), ncol=4,
              fontsize=8)
    ax.grid(alpha=0.3, which="both")

    bounds = phase_bounds(p)
    for ax in axes:
        for name in PHASES[1:]:
            ax.axvline(bounds[name][0], color="grey", linewidth=0.8,
                       linestyle="-", alpha=0.6)
    for ax in axes:
        for name in PHASES:
            a, b = bounds[name]
            ax.text((a + b) / 2, 0.98, name, transform=ax.get_xaxis_transform(),
                    ha="center", va="top", fontsize=8, color="dimgrey")
    fig.suptitle(f"Sluice adaptive experiment: {p['workers']} workers x "
                 f"{p['service_ms']} ms, load 0.5x -> 3x capacity, half the "
                 "workers lost in 'drop'")
    fig.tight_layout()
    fig.savefig(png, dpi=100)


def write_doc(p, results, checks, conv_by_mode, doc, png):
    rel_png = os.path.relpath(png, os.path.dirname(doc))
    modes = " ".join(r["mode"] for r in results)
    with open(doc, "w") as f:
        f.write(f"""# Experiment: adaptive overload protection

Written by `scripts/demo-adaptive --write-docs` on {datetime.date.today()};
what it means is in [adaptive.md](../adaptive.md).

Set-up, all on one 2-core machine: a standalone `sluiced`, the example
gateway (600 threads) and the example backend with {p['workers']} workers x
{p['service_ms']} ms and a queue of {p['queue']} (503 beyond), so a capacity
of {p['capacity']} requests/s; `sluice-example-loadgen` sends an open-loop
load (evenly spaced requests, 2 s client timeout, up to 500 connections).
Phases: warmup {p['warmup_s']} s at 0.5x capacity, ramp {p['ramp_s']} s
from 0.5x to 3x, hold {p['hold_s']} s at 3x, drop {p['drop_s']} s at 3x with
the backend down to {p['half_workers']} workers, recover {p['recover_s']} s
at 3x with all workers back. Modes run one after the other: {modes}.
The static mode's `max_in_flight` is {p['static_limit']}; adaptive's
`tolerance` is {p.get('tolerance', '1.5')}. The 1-minute load average was
{p.get('load_before', '?')} before the runs and {p.get('load_after', '?')}
after (the machine is shared; 2 cores).

Definitions: a good answer is a 2xx from the backend within the client's
timeout, timed from its scheduled send time; goodput is good answers / the
sum over the phase's seconds of min(offered, capacity); 5xx counts gateway
5xx that are not refusals, timeouts and connection errors; the uncongested
latency is the p99 of good answers in the warmup phase (first second left
out). Converged: the first second from which, to the end of the phase,
every second has p99 within the bound (2x uncongested) and goodput at or
above it (90%); counted in the ramp from the second the offered load first
exceeds capacity, in the drop phase from the drop. The p99 goal is checked
over whole phases for hold and recover, from the converged second on for
ramp and drop. {'This was a --short run: looser margins (goodput 80%, p99 3x).' if p['short'] else ''}

{table(results)}

{summary(results, conv_by_mode)}

## Goals for adaptive

""")
        for name, ok, detail in checks:
            f.write(f"- {'met' if ok else '**missed**'}: {name}: {detail}\n")
        f.write(f"""
![the adaptive limit, in-flight and capacity; good answers and p99 per
second for each mode]({rel_png})
""")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("work")
    ap.add_argument("--doc")
    ap.add_argument("--png")
    args = ap.parse_args()
    p = read_env(os.path.join(args.work, "params.env"))
    results = [analyse_mode(p, mode, args.work) for mode in p["modes"].split()]
    bounds = phase_bounds(p)
    conv_by_mode = {}
    for res in results:
        _, bound, goodput_bound = bounds_for(p, res)
        conv_by_mode[res["mode"]] = (
            converged(res, "ramp", overload_start(p), bound, goodput_bound,
                      bounds)[0],
            converged(res, "drop", res["drop_t"], bound, goodput_bound,
                      bounds)[0])
    print()
    print(table(results))
    print()
    print(summary(results, conv_by_mode))
    checks = []
    adaptive = next((r for r in results if r["mode"] == "adaptive"), None)
    if adaptive is not None:
        checks = check_goals(p, adaptive)
        print()
        print("goals for adaptive:")
        for name, ok, detail in checks:
            print(f"  {'ok  ' if ok else 'MISS'} {name}: {detail}")
    if args.png:
        plot(p, results, args.png)
        print(f"\nwrote {args.png}")
    if args.doc:
        write_doc(p, results, checks, conv_by_mode, args.doc, args.png)
        print(f"wrote {args.doc}")
    missed = [c for c in checks if not c[1]]
    if missed:
        print(f"\n{len(missed)} goal(s) missed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
