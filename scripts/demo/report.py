# SPDX-License-Identifier: Apache-2.0
"""Tables, books and targets for scripts/demo-three-phase.

Reads the work directory the script filled (params.env, wrk-*.txt,
metrics-*.txt, events.log, timeline.txt), prints a table per phase and the
checks, optionally writes docs/experiments/three-phase.md and its PNG, and
exits 1 when a check fails.

Usage: report.py WORKDIR [--doc FILE.md --png FILE.png]
"""

import argparse
import datetime
import os
import re
import sys

PHASES = ["healthy", "outage", "recovery"]
STATE_NAMES = {0: "UNKNOWN", 1: "CLOSED", 2: "OPEN", 3: "HALF_OPEN",
               4: "FORCED_OPEN", 5: "FORCED_CLOSED"}


def read_params(work):
    params = {}
    with open(os.path.join(work, "params.env")) as f:
        for line in f:
            key, _, value = line.strip().partition("=")
            params[key] = int(value) if re.fullmatch(r"-?\d+", value) else value
    return params


def read_wrk(work, phase):
    with open(os.path.join(work, f"wrk-{phase}.txt")) as f:
        for line in f:
            if line.startswith("WRK "):
                fields = dict(kv.split("=") for kv in line.split()[1:])
                return {k: float(v) if "." in v else int(v)
                        for k, v in fields.items()}
    raise SystemExit(f"no WRK summary in wrk-{phase}.txt")


def read_metrics(work, name):
    series = {}
    with open(os.path.join(work, f"metrics-{name}.txt")) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            key, value = line.rsplit(" ", 1)
            series[key] = float(value)
    return series


def total(series, prefix, **labels):
    """Sum of the series named `prefix` whose labels include `labels`."""
    out = 0
    for key, value in series.items():
        name, _, rest = key.partition("{")
        if name != prefix:
            continue
        if all(f'{k}="{v}"' in rest for k, v in labels.items()):
            out += value
    return out


def gateway_counts(series):
    return {
        "requests": total(series, "sluice_gateway_requests_total"),
        "responses": total(series, "sluice_gateway_responses_total"),
        "backend_ok": total(series, "sluice_gateway_responses_total",
                            kind="backend"),
        "degraded": total(series, "sluice_gateway_responses_total",
                          kind="degraded"),
        "r429": total(series, "sluice_gateway_responses_total", code="429"),
        "r5xx": sum(v for k, v in series.items()
                    if k.startswith("sluice_gateway_responses_total")
                    and re.search(r'code="5\d\d"', k)),
        "success": total(series, "sluice_gateway_backend_calls_total",
                         result="success"),
        "failure": total(series, "sluice_gateway_backend_calls_total",
                         result="failure"),
        "short_circuit": total(series, "sluice_gateway_backend_calls_total",
                               result="short_circuit"),
        "fail_open_failure": total(series,
                                   "sluice_gateway_fail_open_calls_total",
                                   result="failure"),
        "local_decisions": total(series, "sluice_gateway_sdk_events_total",
                                 event="local_decisions"),
        "reports_dropped": total(series, "sluice_gateway_sdk_events_total",
                                 event="reports_dropped"),
        "breaker": int(total(series, "sluice_gateway_breaker_state")),
        "decisions": decision_buckets(series),
    }


def decision_buckets(series):
    """The gateway's decision-time histogram: {upper bound in s: count}."""
    out = {}
    for key, value in series.items():
        name, _, rest = key.partition("{")
        if name != "sluice_gateway_decision_seconds_bucket":
            continue
        le = re.search(r'le="([^"]+)"', rest).group(1)
        bound = float("inf") if le == "+Inf" else float(le)
        out[bound] = out.get(bound, 0) + value
    return out


def quantile_bound(buckets, q):
    """The upper bound of the bucket that holds quantile `q`: the quantile
    is at most this. None without observations."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    want = q * buckets[bounds[-1]]
    for b in bounds:
        if buckets[b] >= want:
            return b
    return bounds[-1]


def ms_bound(bound):
    if bound is None:
        return "-"
    return "> 25 ms" if bound == float("inf") else f"<= {bound * 1000:g} ms"


def read_events(work):
    events = []
    path = os.path.join(work, "events.log")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                ms, dep, frm, to = line.split()
                events.append((int(ms), dep, frm, to))
    return events


def read_timeline(work):
    rows = []
    path = os.path.join(work, "timeline.txt")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 6:
                    rows.append([int(p) for p in parts])
    return rows


def first_event(events, to, after_ms):
    for ms, _, _, state in events:
        if state == to and ms >= after_ms:
            return ms
    return None


def analyse(work):
    p = read_params(work)
    snapshots = {name: gateway_counts(read_metrics(work, name))
                 for name in ["start"] + PHASES}
    phases = []
    prev = snapshots["start"]
    for name in PHASES:
        cur = snapshots[name]
        delta = {k: cur[k] - prev[k] for k in cur
                 if k not in ("breaker", "decisions")}
        delta["breaker_end"] = STATE_NAMES.get(cur["breaker"], "?")
        delta["decision_p99"] = quantile_bound(
            {b: n - prev["decisions"].get(b, 0)
             for b, n in cur["decisions"].items()}, 0.99)
        phases.append({"name": name, "seconds": p[f"{name}_s"],
                       "wrk": read_wrk(work, name), "gw": delta})
        prev = cur

    events = read_events(work)
    opened = first_event(events, "OPEN", p["kill_ms"])
    closed = first_event(events, "CLOSED", p["restart_ms"])
    open_ms = p["open_duration_s"] * 1000
    rounds = p["outage_s"] * 1000 // open_ms + 1
    probe_attempts = rounds * p["half_open_probes"]
    failure_bound = (p["consecutive_failures"] + p["concurrency"] +
                     probe_attempts)

    checks = []

    def check(name, ok, detail):
        checks.append((name, bool(ok), detail))

    c = p["concurrency"]
    for ph in phases:
        g, w, n = ph["gw"], ph["wrk"], ph["name"]
        check(f"{n}: every request answered exactly once",
              g["requests"] == g["responses"],
              f"gateway received {g['requests']:.0f}, answered "
              f"{g['responses']:.0f}")
        check(f"{n}: wrk and gateway agree",
              0 <= g["responses"] - w["total"] <= c,
              f"wrk counted {w['total']}, gateway {g['responses']:.0f} "
              f"(wrk drops at most {c} in flight when it stops)")
        check(f"{n}: degraded = failed backend calls + short-circuited",
              g["degraded"] == g["failure"] + g["short_circuit"],
              f"{g['degraded']:.0f} = {g['failure']:.0f} + "
              f"{g['short_circuit']:.0f}")
        check(f"{n}: zero 5xx to clients",
              w["r5xx"] == 0 and g["r5xx"] == 0,
              f"wrk saw {w['r5xx']}, gateway sent {g['r5xx']:.0f}")
        check(f"{n}: no socket errors", w["sockerr"] == 0,
              f"{w['sockerr']} connect/read/write/timeout errors")
    check("healthy: no backend failures and breaker CLOSED at the end",
          phases[0]["gw"]["failure"] == 0 and
          phases[0]["gw"]["breaker_end"] == "CLOSED",
          f"{phases[0]['gw']['failure']:.0f} failures, "
          f"{phases[0]['gw']['breaker_end']}")
    outage = phases[1]
    # Calls the SDK let through on its own (Sluice slower than the Acquire
    # deadline, fail-open) never asked the breaker; they are shown, not
    # counted against it.
    og = outage["gw"]
    allowed_failures = og["failure"] - og["fail_open_failure"]
    check("outage: failed backend calls <= consecutive_failures + "
          "concurrency + probe attempts",
          allowed_failures <= failure_bound,
          f"{allowed_failures:.0f} <= {p['consecutive_failures']} + "
          f"{c} + {probe_attempts} = {failure_bound}"
          + (f" (plus {og['fail_open_failure']:.0f} made on the SDK's "
             "fail-open while Sluice was slow)"
             if og["fail_open_failure"] else ""))
    kill_to_open = None if opened is None else opened - p["kill_ms"]
    check("breaker opens within 1.5 s of the kill",
          kill_to_open is not None and kill_to_open <= 1500,
          "never opened" if kill_to_open is None else f"{kill_to_open} ms")
    check("outage: p99 latency < 50 ms", outage["wrk"]["p99_ms"] < 50,
          f"{outage['wrk']['p99_ms']:.2f} ms")
    if p.get("lease") == "true":
        # With leases the SDK repeats the OPEN breaker's answer in the
        # gateway's process: Sluice adds no round trip to most requests.
        decision_p99 = og["decision_p99"]
        check("outage: p99 decision time <= 1 ms (leases on)",
              decision_p99 is not None and decision_p99 <= 0.001,
              ms_bound(decision_p99))
    restart_to_close = None if closed is None else closed - p["restart_ms"]
    close_bound = open_ms + 2 * p["tick_ms"]
    check("breaker closes within open_duration + 2 ticks of the restart",
          restart_to_close is not None and restart_to_close <= close_bound,
          ("never closed" if restart_to_close is None else
           f"{restart_to_close} ms <= {open_ms} + 2 x {p['tick_ms']} = "
           f"{close_bound} ms"))
    check("recovery: breaker CLOSED at the end",
          phases[2]["gw"]["breaker_end"] == "CLOSED",
          phases[2]["gw"]["breaker_end"])
    return {"params": p, "phases": phases, "checks": checks,
            "kill_to_open": kill_to_open,
            "restart_to_close": restart_to_close,
            "failure_bound": failure_bound, "events": events,
            "timeline": read_timeline(work)}


def table(result):
    head = ("| phase | seconds | requests | backend OK | degraded | 429 | "
            "other errors | p50 | p99 | decision p99 | breaker at end |")
    lines = [head, "|" + "---|" * 11]
    for ph in result["phases"]:
        w, g = ph["wrk"], ph["gw"]
        other = w["r5xx"] + w["other"] + w["sockerr"]
        lines.append(
            f"| {ph['name']} | {ph['seconds']} | {w['total']} | "
            f"{w['backend']} | {w['degraded']} | {w['r429']} | {other} | "
            f"{w['p50_ms']:.2f} ms | {w['p99_ms']:.2f} ms | "
            f"{ms_bound(g['decision_p99'])} | {g['breaker_end']} |")
    return "\n".join(lines)


def books(result):
    head = ("| phase | gateway requests | backend success | backend failure | "
            "short-circuited | degraded | 429 | 5xx | SDK local decisions | "
            "failures on fail-open |")
    lines = [head, "|" + "---|" * 10]
    for ph in result["phases"]:
        g = ph["gw"]
        lines.append(
            f"| {ph['name']} | {g['requests']:.0f} | {g['success']:.0f} | "
            f"{g['failure']:.0f} | {g['short_circuit']:.0f} | "
            f"{g['degraded']:.0f} | {g['r429']:.0f} | {g['r5xx']:.0f} | "
            f"{g['local_decisions']:.0f} | {g['fail_open_failure']:.0f} |")
    return "\n".join(lines)


def checks_text(result):
    return "\n".join(f"- [{'x' if ok else ' '}] {name}: {detail}"
                     for name, ok, detail in result["checks"])


def plot(result, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    p = result["params"]
    rows = result["timeline"]
    t0 = p["start_ms"]
    xs, series = [], {"backend OK": [], "degraded": [], "429": [],
                      "errors": []}
    states = []
    for prev, cur in zip(rows, rows[1:]):
        dt = (cur[0] - prev[0]) / 1000
        if dt <= 0:
            continue
        xs.append((cur[0] - t0) / 1000)
        for i, name in enumerate(series, start=1):
            series[name].append(max(0, cur[i] - prev[i]) / dt)
        states.append(cur[5])
    fig, ax = plt.subplots(figsize=(11, 5))
    colors = {"backend OK": "tab:green", "degraded": "tab:blue",
              "429": "tab:orange", "errors": "tab:red"}
    for name, ys in series.items():
        ax.plot(xs, ys, label=f"{name} /s", color=colors[name], linewidth=1.4)
    shade = {2: ("tab:red", "breaker OPEN"), 3: ("gold", "HALF_OPEN")}
    labelled = set()
    for i, x in enumerate(xs):
        s = states[i]
        if s in shade:
            left = xs[i - 1] if i else x - 0.25
            color, label = shade[s]
            ax.axvspan(left, x, color=color, alpha=0.15, linewidth=0,
                       label=None if s in labelled else label)
            labelled.add(s)
    for ms, text in [(p["kill_ms"], "backend killed"),
                     (p["restart_ms"], "backend restarted")]:
        ax.axvline((ms - t0) / 1000, color="black", linestyle="--",
                   linewidth=1)
        ax.text((ms - t0) / 1000, ax.get_ylim()[1] * 0.97, " " + text,
                va="top", fontsize=9)
    ax.set_xlabel("seconds since start")
    ax.set_ylabel("responses per second")
    ax.set_title("Sluice three-phase experiment: responses by kind, breaker "
                 "state shaded")
    ax.legend(loc="center right", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=100)


def write_doc(result, doc, png):
    p = result["params"]
    rel_png = os.path.relpath(png, os.path.dirname(doc))
    date = datetime.datetime.utcfromtimestamp(p["start_ms"] / 1000)
    mode = (f"{p['replicas']} sluiced replicas in cluster mode (Redis)"
            if p["mode"] == "cluster" else
            "ONE standalone sluiced replica (this build had no cluster mode "
            "yet; the script falls back to it and says so)")
    text = f"""# The three-phase experiment: healthy → outage → recovery

One run of `scripts/demo-three-phase --write-docs`, {date:%Y-%m-%d %H:%M} UTC,
on the 2-core development VM. Everything ran on loopback: {mode}, the
example backend (`sluice-example-backend`, 2 ms per request) and the example
gateway (`sluice-example-gateway`, SDK with a 20 ms Acquire deadline,
fail-open). `wrk` drove the gateway at a fixed concurrency of
{p['concurrency']} connections, as fast as it answered.

The policy (`catalog`): token bucket {p['rate']}/s cluster-wide (burst
{p['rate'] // 5}), at most 64 in flight, breaker on
{p['consecutive_failures']} consecutive failures with open_duration =
max_open_duration = {p['open_duration_s']} s, {p['half_open_probes']} probes in
HALF_OPEN, 2 successes to close, and a CACHE fallback (last good answer, else
a static payload) on CIRCUIT_OPEN and PROBE_LIMIT and on failed calls.

Phases: healthy {p['healthy_s']} s; backend killed with SIGKILL,
{p['outage_s']} s; backend restarted, {p['recovery_s']} s.

## Per phase (client side, from wrk)

{table(result)}

"backend OK" are real backend answers, "degraded" are 200s with
`{{"degraded": true, ...}}` and the fallback, "429" carry `Retry-After`, "other
errors" are 5xx, unexpected statuses and socket errors. "decision p99" is
what Sluice added to the request: the bucket of the gateway's
`sluice_gateway_decision_seconds` histogram that holds the 99th percentile
of the time each request waited for its decision (leases
{"on" if p.get("lease") == "true" else "off"}).

- Kill → breaker OPEN: **{result['kill_to_open']} ms** (the first Sluice
  answer that said OPEN after the kill).
- Restart → breaker CLOSED: **{result['restart_to_close']} ms** (the backend
  was back; the breaker waited out its open time, probed, and closed).

## The books (gateway side, from its /metrics)

{books(result)}

"SDK local decisions" are Acquires that Sluice did not answer within the
20 ms deadline (the two cores are shared by every process here); the SDK
failed open on them. In the outage such calls reach the dead backend without
asking the breaker, so the bound on failed calls counts only the calls Sluice
allowed, and the last column shows the others.

## Checks

{checks_text(result)}

## Timeline

![responses per second by kind, breaker state shaded]({rel_png})

## What each gate did

- **Rate limit**: in the healthy and recovery phases the load is far above
  {p['rate']}/s, so Sluice admits about that many calls per second and the
  rest get 429 with `Retry-After`; the backend never sees the excess.
- **Circuit breaker**: after the kill, the first {p['consecutive_failures']}
  failures open it; from then on calls are short-circuited without touching
  the dead backend, except the HALF_OPEN probes every
  {p['open_duration_s']} s, which fail and reopen it. Because the breaker sits
  before the rate gate, short-circuited calls spend no tokens.
- **Degradation**: every call that failed and every call the breaker
  refused was answered 200 with the cached last good response, so clients
  saw zero 5xx. Short-circuited answers are fast: p99 in the outage is the
  cost of one Acquire plus the gateway.

Reproduce: `scripts/demo-three-phase` (about 70 s; `--short` takes about
20 s and is what CI runs; `--write-docs` rewrites this page).
"""
    with open(doc, "w") as f:
        f.write(text)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("work")
    parser.add_argument("--doc")
    parser.add_argument("--png")
    args = parser.parse_args()
    result = analyse(args.work)
    p = result["params"]
    print()
    print(f"Mode: {p['mode']}, {p['replicas']} replica(s); "
          f"concurrency {p['concurrency']}")
    print(table(result))
    print()
    print(f"kill -> breaker OPEN:      {result['kill_to_open']} ms")
    print(f"restart -> breaker CLOSED: {result['restart_to_close']} ms")
    print()
    print("Books (gateway /metrics):")
    print(books(result))
    print()
    print("Checks:")
    print(checks_text(result))
    if args.png:
        os.makedirs(os.path.dirname(args.png), exist_ok=True)
        plot(result, args.png)
        print(f"wrote {args.png}")
    if args.doc:
        os.makedirs(os.path.dirname(args.doc), exist_ok=True)
        write_doc(result, args.doc, args.png)
        print(f"wrote {args.doc}")
    failed = [name for name, ok, _ in result["checks"] if not ok]
    if failed:
        print(f"\nFAILED: {len(failed)} check(s): " + "; ".join(failed))
        return 1
    print("\nAll checks passed.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
