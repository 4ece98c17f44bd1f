"""docs/benchmarks/scale.md from the raw results of one ``benchmarks/scale.py`` run, and nothing else.

``benchmarks/scale.py all`` writes its raw results (every run's figures, the commit, the command, the
load, the settings both sides ran with) to ``docs/benchmarks/raw/scale-<time>.json`` and then the report
with :func:`render`. The report has no hand-written figure: every number in it is read from the raw
file, a figure the raw file lacks is an error (:class:`MissingFigure`), not a blank, and
``benchmarks/scale.py report --raw FILE`` writes the same text again from the same file
(tests/test_benchmark_report.py checks that the committed report is exactly that).
Hand-written history, with the commit each figure was measured on, is in docs/benchmarks/scale-history.md.

Pure: no clock, no git, no process is read here; :func:`render` is a function of the raw file.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

FORMAT = 2  # the raw results' format this report reads (2: failover actions on workers drawn with replacement)
BURST_TARGET_JOBS = 1000
FAILOVER_TARGET = (1000, 20.0)  # jobs, disruptions per second
COLDSTART_TARGET_JOBS = 10_000
# Scenarios that run once per side, in pairs (ours, then the kopf peer's), --runs times each.
PAIRS = {"burst": "burst (kopf peer)", "failover, at the peer's scale": "failover (kopf peer)"}


# The scenarios against a server other than the default one (secure, writes held 10 ms, tighter limits):
# the targets are stated for the default server, so these rows have none.
OTHER_SERVER = ("burst, beside a neighbour", "burst, API server pushing back", "failover, API server pushing back")


def no_target(scenario: str, sizes: str) -> str:
    """The target column of a row the target is not stated for."""
    return "- (the target is for the default server)" if scenario in OTHER_SERVER else f"- (the target is for {sizes})"


class MissingFigure(ValueError):
    """The report needs a figure the raw results do not have."""


def need(record: dict[str, Any], *path: str, where: str = "") -> Any:
    """``record[path[0]][path[1]]...``, or :class:`MissingFigure` naming what is missing and where."""
    value: Any = record
    for i, key in enumerate(path):
        if not isinstance(value, dict) or key not in value:
            where = where or str(record.get("scenario", "the raw results"))
            raise MissingFigure(f"{where}: no {'.'.join(path[: i + 1])!r} in the raw results")
        value = value[key]
    return value


def med(runs: list[dict], *path: str) -> float | None:
    """The median over ``runs`` of the figure at ``path`` (None when it is None in every run: not reached)."""
    values = [need(run, *path) for run in runs]
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def fmt_s(value: float | None) -> str:
    return "not reached" if value is None else f"{value:.1f} s"


def fmt_int(value: float) -> str:
    return f"{value:,.0f}"


def fmt_dist(runs: list[dict], *path: str) -> str:
    """p50/p99/max in ms of a latency distribution, each the median over the runs."""
    if not med(runs, *path, "n"):
        return "none"
    p50, p99, top = (med(runs, *path, q) for q in ("p50", "p99", "max"))
    n = med(runs, *path, "n")
    assert p50 is not None and p99 is not None and top is not None
    return f"p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, max {top * 1000:.0f} ms (n={n:.0f})"


def runs_note(runs: list[dict]) -> str:
    return f", median of {len(runs)} runs" if len(runs) > 1 else ", 1 run"


def events_text(runs: list[dict]) -> str:
    """Events written on TFJobs in the simulator's store: objects, occurrences, jobs that show one."""
    jobs = need(runs[0], "jobs")
    written, occurrences, shown = (med(runs, "events", key) for key in ("written", "occurrences", "jobs_with_events"))
    assert written is not None and occurrences is not None and shown is not None
    dropped = med(runs, "events_dropped")  # None: the side has no recorder that counts drops
    return (
        f"events {fmt_int(written)} written ({occurrences / jobs:.1f} occurrences/job), "
        f"{fmt_int(shown)} of {fmt_int(jobs)} jobs show one"
        + ("" if dropped is None else f", {fmt_int(dropped)} dropped")
    )


def met(ok: bool | None) -> str:
    return "-" if ok is None else "yes" if ok else "no"


def summarize(label: str, runs: list[dict]) -> str:
    """The table row of one scenario: the median of its runs."""
    first = runs[0]
    scenario = need(first, "scenario")
    if first.get("skipped"):
        return f"| {scenario} | {first.get('jobs', '-')} jobs | not measured: {first['skipped']} | - | - |"
    if scenario == "kopf peer self-check":
        return (
            f"| {scenario} | {need(first, 'jobs')} jobs | passed: a burst creates each pod and service once and "
            f"reaches Running; a start on converged jobs writes nothing; {need(first, 'disruptions')} failovers "
            "(one of each kind) replaced, 0 Failed | must pass | yes |"
        )
    jobs = need(first, "jobs")
    if scenario.startswith("burst"):
        running = med(runs, "all_running_s")
        at_size = jobs == BURST_TARGET_JOBS and scenario not in OTHER_SERVER
        return (
            f"| {scenario} | {fmt_int(jobs)} jobs x {need(first, 'pods_per_job')} pods{runs_note(runs)} | "
            f"all pods {fmt_s(med(runs, 'all_pods_s'))} / all Running {fmt_s(running)}; "
            f"{med(runs, 'requests_per_job'):.1f} requests/job; {events_text(runs)}; "
            f"CPU {med(runs, 'controller_cpu_s'):.1f} s (simulator {med(runs, 'sim_cpu_s'):.1f} s) | "
            f"{'all Running <= 30 s' if at_size else no_target(scenario, '1,000 jobs')} | "
            f"{met((running is not None and running <= 30) if at_size else None)} |"
        )
    if scenario.startswith("failover"):
        return failover_row(runs)
    if scenario == "scaledown":
        return (
            f"| scale-down storm | {fmt_int(jobs)} jobs, Worker {need(first, 'from_to')}{runs_note(runs)} | all "
            f"excess pods gone {fmt_s(med(runs, 'all_gone_s'))}; {med(runs, 'requests_per_job'):.1f} "
            f"requests/job; {events_text(runs)}; CPU {med(runs, 'controller_cpu_s'):.1f} s | - | - |"
        )
    if scenario == "coldstart":
        reconciled, writes, rss = (med(runs, key) for key in ("all_reconciled_s", "writes", "controller_peak_rss_mib"))
        assert writes is not None and rss is not None
        at_size = jobs == COLDSTART_TARGET_JOBS
        ok = not any(need(r, "timed_out") for r in runs) and reconciled is not None and reconciled <= 60
        ok = ok and writes == 0 and rss <= 1024
        return (
            f"| cold start | {fmt_int(jobs)} jobs / {fmt_int(need(first, 'pods'))} pods{runs_note(runs)} | ready "
            f"{fmt_s(med(runs, 'ready_s'))} / all reconciled {fmt_s(reconciled)} / {writes:.0f} writes / peak "
            f"RSS {rss:.0f} MiB | {'<= 60 s, 0 writes, <= 1 GiB' if at_size else '- (the target is for 10,000 jobs)'}"
            f" | {met(ok if at_size else None)} |"
        )
    raise MissingFigure(f"no table row is defined for the scenario {scenario!r}")


def caught_up_text(runs: list[dict]) -> str:
    return (
        f"once it had caught up with the jobs ({fmt_s(med(runs, 'caught_up_s'))} after it started, "
        f"{max(need(r, 'catchup_writes') for r in runs)} writes)"
    )


def count(runs: list[dict], group: str, key: str) -> str:
    """A count of one group of failover actions, the median over the runs."""
    value = med(runs, "latency", group, key)
    assert value is not None
    return fmt_int(value)


def group_text(runs: list[dict], group: str) -> str:
    """What became of one group of failover actions, and its latencies (an eviction alone can be refused)."""
    latency = ("latency", group)
    refused = f", {count(runs, group, 'refused')} refused (429)" if group == "disruptions" else ""
    to_create = f"; action -> create {fmt_dist(runs, *latency, 'disruption_to_create')}" if refused else ""
    return (
        f"{count(runs, group, 'applied')} applied ({count(runs, group, 'superseded')} of their replacements hit "
        f"again before they ran), {count(runs, group, 'skipped')} skipped (pod already gone)"
        f"{refused}; gone -> create {fmt_dist(runs, *latency, 'gone_to_create')}{to_create}; action -> Running "
        f"{fmt_dist(runs, *latency, 'disruption_to_running')}"
    )


def failover_row(runs: list[dict]) -> str:
    """Failover on random workers, repeats included: disruptions (DELETE, eviction) and, apart, the
    worker's own failures (OOM exit), whose repeats wait out the crash-loop back-off by design."""
    first = runs[0]
    jobs, rate = need(first, "jobs"), need(first, "rate")
    failed = max(need(run, "jobs_failed") for run in runs)
    unreplaced = max(need(run, "latency", group, "unreplaced") for run in runs for group in ("disruptions", "oom"))
    p99 = med(runs, "latency", "disruptions", "gone_to_create", "p99")
    at_size = (jobs, rate) == FAILOVER_TARGET and need(first, "scenario") not in OTHER_SERVER
    target = (
        "random repeating disruptions at 20/s over 1,000 jobs: p99 gone -> create <= 250 ms, 0 Failed"
        if at_size
        else no_target(need(first, "scenario"), "1,000 jobs at 20/s")
    )
    ok = p99 is not None and p99 <= 0.25 and not failed and not unreplaced
    return (
        f"| {need(first, 'scenario')} | {fmt_int(jobs)} jobs, {need(first, 'actions')} actions at {rate:g}/s on "
        f"workers drawn at random, repeats included ({need(first, 'workers_hit')} workers hit){runs_note(runs)}; "
        f"they began {caught_up_text(runs)} | **disruptions** (DELETE, eviction; "
        f"{count(runs, 'disruptions', 'repeats')} repeats, {count(runs, 'disruptions', 'on_starting')} of them on "
        f"a replacement still starting): {group_text(runs, 'disruptions')}; the repeats alone: gone -> create "
        f"{fmt_dist(runs, 'latency', 'disruption_repeats', 'gone_to_create')}. **Own failures** (OOM exit; a "
        "repeat on a worker waits out the crash-loop back-off by design): first on a worker: "
        f"{group_text(runs, 'own_first')}; repeat: {group_text(runs, 'own_repeat')}. Jobs Failed {failed}, "
        f"actions without a replacement {unreplaced} (most of any run); {events_text(runs)}; "
        f"CPU {med(runs, 'controller_cpu_s'):.1f} s | {target} | {met(ok if at_size else None)} |"
    )


def peer_rows(results: dict[str, list[dict]]) -> list[str]:
    """Ours against the kopf peer, measured in the same run (the runs interleaved)."""
    rows = []
    ours, peer = results.get("burst"), results.get("burst (kopf peer)")
    if ours and peer:
        jobs = need(ours[0], "jobs")
        a, b = med(ours, "all_running_s"), med(peer, "all_running_s")
        ca, cb = med(ours, "controller_cpu_s"), med(peer, "controller_cpu_s")
        assert ca is not None and cb is not None
        ratio = b / a if a and b else None
        at_size = jobs == BURST_TARGET_JOBS
        result = (
            f"{ratio:.2f}x the peer's throughput ({a:.1f} s vs {b:.1f} s to all Running)"
            if ratio
            else f"ours {fmt_s(a)}, the peer {fmt_s(b)} to all Running"
        )
        rows.append(
            f"| burst: ours vs kopf peer | {fmt_int(jobs)} jobs{runs_note(ours)} each | {result}; CPU {ca:.1f} s vs "
            f"{cb:.1f} s ({cb / ca:.1f}x); {fmt_int(med(ours, 'events', 'written') or 0)} vs "
            f"{fmt_int(med(peer, 'events', 'written') or 0)} events written | "
            f"{'>= 5x' if at_size else '-'} | {met((ratio is not None and ratio >= 5) if at_size else None)} |"
        )
    ours, peer = results.get("failover, at the peer's scale"), results.get("failover (kopf peer)")
    if ours and peer and not ours[0].get("skipped") and not peer[0].get("skipped"):
        gone = ("latency", "disruptions", "gone_to_create")
        a, b = med(ours, *gone, "p99"), med(peer, *gone, "p99")
        lower = a is not None and (b is None or a < b)  # no replacement at all is the worst p99

        def p99(value: float | None) -> str:
            return "no replacement measured" if value is None else f"{value * 1000:.0f} ms"

        rows.append(
            f"| failover: ours vs kopf peer | {fmt_int(need(ours[0], 'jobs'))} jobs{runs_note(ours)} each | p99 gone "
            f"-> create {p99(a)} vs the peer's {p99(b)} | lower p99 | {met(lower)} |"
        )
        a_up, b_up = med(ours, "caught_up_s"), med(peer, "caught_up_s")
        rows.append(
            f"| start on converged jobs: ours vs kopf peer | {fmt_int(need(ours[0], 'jobs'))} jobs | caught up in "
            f"{fmt_s(a_up)} vs the peer's {fmt_s(b_up)}{f' ({b_up / a_up:.1f}x)' if a_up and b_up else ''} | - | - |"
        )
    return rows


def rejections_text(runs: list[dict]) -> str:
    """The server's 429s in each run (API Priority and Fairness rejections, requests a client gave up on
    while queued left out: no 429 was sent), then by priority level and reason over all runs."""
    per_run, by_cause = [], {}
    for run in runs:
        rejected = need(run, "apf", "rejected")
        if rejected is None:
            return "- (the server ran without API Priority and Fairness)"
        total = 0
        for level, reasons in sorted(rejected.items()):
            for reason, n in sorted(reasons.items()):
                if reason != "cancelled" and n:
                    total += n
                    by_cause[f"{level} {reason}"] = by_cause.get(f"{level} {reason}", 0) + n
        per_run.append(fmt_int(total))
    causes = ", ".join(f"{cause} {fmt_int(n)}" for cause, n in by_cause.items())
    return " / ".join(per_run) + (f" ({causes})" if causes else "")


def neighbour_text(runs: list[dict], window: str) -> str:
    if need(runs[0], "apf", "neighbour") is None:
        return "-"
    rejected = sum(need(run, "apf", "neighbour", window, "rejected") for run in runs)
    other = sum(need(run, "apf", "neighbour", window, "other") for run in runs)
    return f"{fmt_dist(runs, 'apf', 'neighbour', window)}; {fmt_int(rejected)} x 429" + (
        f", {fmt_int(other)} other errors" if other else ""
    )


def apf_rows(raw: dict[str, Any]) -> list[str]:
    """The API Priority and Fairness section: every scenario of ours (not the kopf peer's) that sent requests
    through the server, with its 429s seen by the server and by the controller, its jobs, and the
    neighbour's latency idle and during the scenario. None for raw results of a run that did not measure it."""
    settings = need(raw, "settings")
    if "apf" not in settings:
        return []
    apf = need(settings, "apf")
    rows = [
        "## Against an API server that pushes back",
        "",
        "The simulator runs API Priority and Fairness as kube-apiserver does (bootstrap FlowSchemas, seats from "
        "`--max-requests-inflight` + `--max-mutating-requests-inflight`, fair queues, 429 + Retry-After). "
        '"burst, beside a neighbour" and the "pushing back" scenarios run it secure: the controller as the '
        "ServiceAccount of manifests/ (flow schema `service-accounts`, level `workload-low`), the benchmark as the "
        "cluster admin (exempt), and a neighbour: another ServiceAccount of the same level (another flow) "
        f"GETting one ConfigMap {need(apf, 'neighbour_rate'):g} times a second, from "
        f"{need(apf, 'neighbour_idle_s'):g} s before the scenario (idle) to its end (during), as its own process. "
        f'Every write holds its seat {need(apf, "write_latency") * 1000:g} ms. "burst, beside a neighbour" '
        f'runs at the default limits; "burst, API server pushing back" with `{" ".join(need(apf, "burst_sim_args"))}`, '
        f'"failover, API server pushing back" with `{" ".join(need(apf, "failover_sim_args"))}`. The controller '
        "runs with its default `--kube-api-qps auto` (no client-side limit against a server with API Priority and "
        "Fairness).",
        "",
        "| scenario | 429s by the server (per run; by priority level and reason) | the controller's 429s: seen / "
        "retried after Retry-After | jobs | neighbour idle | neighbour during |",
        "|---|---|---|---|---|---|",
    ]
    for label, runs in need(raw, "results").items():
        if label.endswith("(kopf peer)") or runs[0].get("skipped") or "apf_rejected" not in runs[0]:
            continue
        seen, retried = (
            " / ".join(fmt_int(need(run, "apf", "controller_429", key)) for run in runs) for key in ("seen", "retried")
        )
        failed = max(need(run, "apf", "jobs_failed") for run in runs)
        running = min(need(run, "apf", "jobs_running") for run in runs)
        rows.append(
            f"| {label} | {rejections_text(runs)} | {seen} / {retried} | {fmt_int(failed)} Failed, "
            f"{fmt_int(running)} of {fmt_int(need(runs[0], 'jobs'))} Running | {neighbour_text(runs, 'idle')} | "
            f"{neighbour_text(runs, 'during')} |"
        )
    return [*rows, ""]


def _items(mapping: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in mapping.items())


def equal_work(raw: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(the header's lines on the work each side did, the differences between the sides)."""
    settings = need(raw, "settings")
    events, collector = need(settings, "events"), need(settings, "collector")
    differences = []
    peer_runs = [run for label, runs in need(raw, "results").items() if label.endswith("(kopf peer)") for run in runs]
    reported = {
        (need(run, "peer_settings", "events"), need(run, "peer_settings", "gc"))
        for run in peer_runs
        if not run.get("skipped")
    }
    peer_policy = need(events, "peer")
    ours_gc = ",".join(str(n) for n in need(collector, "ours"))
    if peer_policy != "recorder":
        differences.append("events: the peer posts every event through `kopf.event`; ours records through its recorder")
    if need(collector, "peer") != "tuned":
        differences.append("collector: the peer keeps CPython's default thresholds; ours runs with tuned ones")
    for policy, gc in sorted(reported):
        if policy != peer_policy:
            differences.append(f"a peer run reported events policy {policy!r}, not {peer_policy!r}")
        if need(collector, "peer") == "tuned" and gc != ours_gc:
            differences.append(f"a peer run reported collector thresholds ({gc}), not ours ({ours_gc})")
    lines = [
        f"- **Events.** Ours: the controller's recorder (`controller/runtime/events.py`; its settings: "
        f"{_items(need(events, 'ours'))}). The kopf peer: "
        + (
            "the same recorder with the same settings (`KOPF_PEER_EVENTS=recorder`), so both sides correlate, "
            "queue and drop events by one policy."
            if peer_policy == "recorder"
            else "every event posted through `kopf.event` (`KOPF_PEER_EVENTS=kopf`), none dropped."
        )
        + " Each row counts the Events on TFJobs that the simulator's store holds after the run (objects "
        "written, occurrences they record, jobs that show at least one), counted once no event has been "
        "written for 2 s, and the events a recorder dropped (its `events_dropped_total`).",
        f"- **Garbage collector.** Ours and the simulator: thresholds ({ours_gc}) "
        "(`controller/ops/collector.py`, set by `tfjob-controller run` and `sim`). The kopf peer: "
        + (
            "the same (`KOPF_PEER_GC=tuned`)"
            if need(collector, "peer") == "tuned"
            else "CPython's defaults (`KOPF_PEER_GC=default`)"
        )
        + "; as each peer run reported it: "
        + ("; ".join(f"events {p}, thresholds ({g})" for p, g in sorted(reported)) or "no peer run")
        + ".",
    ]
    return lines, differences


# The sizes the targets are stated for: benchmarks/scale.py's defaults.
DEFAULT_SIZES = {"jobs": 1000, "workers": 4, "peer_jobs": 300, "cold_jobs": 10_000, "rate": 20.0, "duration": 60.0}


def sizes(settings: dict[str, Any]) -> str:
    used = {key: need(settings, key) for key in DEFAULT_SIZES}
    text = (
        f"- **Sizes.** {used['jobs']:,} jobs of 1 PS + {used['workers']} workers (burst, failover, scale-down), "
        f"{used['peer_jobs']:,} beside the peer's failover, {used['cold_jobs']:,} in the cold start; failover: "
        f"{used['rate']:g} disruptions/s for {used['duration']:g} s."
    )
    if used != DEFAULT_SIZES:
        smaller = ", ".join(f"{k} {used[k]:g} (default {v:g})" for k, v in DEFAULT_SIZES.items() if used[k] != v)
        text += (
            f" **Not the default sizes** ({smaller}): this run shows that every scenario works; it does "
            "not measure the targets, which are stated for the defaults."
        )
    return text


def header(raw: dict[str, Any], raw_link: str) -> list[str]:
    settings, results = need(raw, "settings"), need(raw, "results")
    took = sum(need(run, "wall_s") for runs in results.values() for run in runs) / 60
    starts = sorted(
        {
            (need(run, "scenario"), need(run, "pod_start_seconds"))
            for runs in results.values()
            for run in runs
            if not run.get("skipped") and "pod_start_seconds" in run
        }
    )
    if len({seconds for _, seconds in starts}) == 1:
        start_text = f"{starts[0][1]:g} s in every scenario"
    else:
        start_text = "; ".join(f"{scenario} {seconds:g} s" for scenario, seconds in starts) or "no scenario ran"
    paired = [label for a, b in PAIRS.items() if a in results and b in results for label in (a, b)]
    once = [label for label in results if label not in paired]
    runs_text = "; ".join(
        [
            *(
                f"{a} and {b}: {len(results[a])} and {len(results[b])} runs, alternating"
                for a, b in PAIRS.items()
                if a in paired
            ),
            *(f"{label}: {len(results[label])} run{'s' if len(results[label]) > 1 else ''}" for label in once),
        ]
    )
    if any(label.endswith("(kopf peer)") for label in results):
        work, differences = equal_work(raw)
        verdict = (
            "yes: the same events policy and collector settings on both sides."
            if not differences
            else "**no**: " + "; ".join(differences) + "."
        )
        work.append("- **Equal work:** " + verdict)
    else:
        work = ["- **Equal work:** no kopf peer ran in this command; nothing is compared."]
    return [
        f"- **Run.** `{need(raw, 'command')}` at git {need(raw, 'git')}, {need(raw, 'started')} to "
        f"{need(raw, 'ended')}, on {need(raw, 'machine')}. The runs took {took:.0f} minutes in all (the sum "
        "of their `wall_s`).",
        f"- **Load average** (1/5/15 min): {need(raw, 'load_start')} when the command started, "
        f"{need(raw, 'load_end')} when it ended; each run's before and after is its `load` in the raw file. "
        "Other work on the machine slows every wall-clock figure; request counts do not change with load, "
        "and CPU seconds little.",
        sizes(settings),
        f"- **Runs** (`--runs {need(settings, 'runs')}`): {runs_text}. The table gives the median of a "
        "scenario's runs; every run is in the raw file.",
        "- **How pods start.** The simulated kubelet runs a pod's container `start-seconds` after it is "
        "bound (the pod template's `sim.tfjob.dev/start-seconds` annotation): " + start_text + ".",
        *work,
        f"- **Raw results:** [{raw_link}]({raw_link}).",
    ]


def standing(results: dict[str, list[dict]]) -> list[str]:
    """One sentence on where ours stands against the peer in this run, whatever the ratio."""
    ours, peer = results.get("burst"), results.get("burst (kopf peer)")
    if not ours or not peer:
        return []
    a, b = med(ours, "all_running_s"), med(peer, "all_running_s")
    ca, cb = med(ours, "controller_cpu_s"), med(peer, "controller_cpu_s")
    assert ca is not None and cb is not None
    if a is None or b is None:
        return [
            f"In this run the burst did not reach all Running on both sides (ours {fmt_s(a)}, the peer {fmt_s(b)})."
        ]
    return [
        f"In this run, on {fmt_int(need(ours[0], 'jobs'))} jobs, ours brought every job to Running in {a:.1f} s and "
        f"the kopf peer in {b:.1f} s: **{b / a:.2f}x** by wall clock, **{cb / ca:.1f}x** less controller CPU "
        f"({ca:.1f} s vs {cb:.1f} s), medians of {len(ours)} and {len(peer)} runs."
    ]


METHOD_TEMPLATE = """\
- Both processes are started as users start them (`python -m controller sim --nodes N`,
  `python -m controller run --kubeconfig ... --no-leader-elect`, or `kopf run --standalone
  benchmarks/kopf_peer.py`), and driven over HTTP only. A fresh simulator serves each run.
- Times are the simulator's: `GET /_sim/history?resource=R&since=RV` lists each committed change of a
  resource with the store's commit time, the pod phase and the conditions that are True;
  `GET /_sim/requests?since=MARK` gives the arrival time of each request. "Pod gone" is the store
  removing the pod, "replacement create" the store committing the new pod of the same name,
  "Running" the commit that turns its phase Running, "disruption" the arrival of the benchmark's
  DELETE / eviction / OOM-exit annotation. The benchmark's polling lag never enters a figure.
- Controller figures are apart from the simulator's: `GET /_sim/requests/summary?since=MARK` counts
  requests per User-Agent; CPU seconds and peak RSS are read from `/proc/PID` of each process. A
  run's figures are taken once no Event has been written for 2 s, so events still queued when the
  last job became Running are in the counts, on both sides.
- Converged jobs (failover, scale-down, cold start) are built with the controller's own `decide()`
  and loaded with `POST /_sim/objects` (the store's own writes, checked to be a fixed point of
  `decide()`), so setting up 10,000 jobs does not depend on the controller.
{failover}
- The kopf peer ([benchmarks/kopf_peer.py](../../benchmarks/kopf_peer.py)) is the same `decide()`
  driven by kopf handlers; `peer-check` runs it at 5 jobs first, where every figure is exact, and
  stops the run if it is broken. Its failover is measured at `--peer-jobs` (kopf's start on converged
  jobs grows with the square of the objects), next to ours at the same scale.
- API Priority and Fairness: the 429s are the server's `apiserver_flowcontrol_rejected_requests_total`
  (its `/metrics`, which must serve the series; none counted is 0) and the controller's own
  `rest_client_requests_total` and `rest_client_request_retries_total` with code 429; the neighbour
  ([benchmarks/neighbour.py](../../benchmarks/neighbour.py)) sends its GETs open loop (on schedule, whether
  or not the last one answered) and times each up to the complete body.
- `--profile` attaches py-spy to both processes for the measured phase; summaries in
  [profiles/](profiles/)."""

FAILOVER_METHOD = """\
- Failover actions go to workers drawn at random **with replacement** over every worker (seed 11),
  so a worker is hit again, sometimes while its last replacement still starts; every three actions
  hold one DELETE, one eviction and one OOM exit, in random order. Each action is measured by
  itself, not by pod name: its request (a User-Agent of its own) gives its arrival and its answer;
  the pod it hit is the uid of that name the store held when it arrived; "pod gone" is that uid's
  removal, "replacement create" the next new uid of the name after it, "Running" that uid's first
  Running commit. A DELETE or OOM annotation answered 404 (the pod already gone) is counted as
  skipped, an eviction answered 429 as refused; neither is in the latencies. A repeat is an action
  on a worker already hit in this run. DELETE and eviction are disruptions: the controller replaces
  the worker at once however often it happens. The OOM exit is the worker's own failure: its first
  is replaced at once, a repeat on the same worker waits out the per-index crash-loop back-off (10 s,
  doubling) by design, so own failures are reported apart, first and repeat, and the target reads
  the disruptions only. Actions start once the controller (or the peer) has caught up with the
  converged jobs; that wait is reported with the writes made meanwhile."""


def render(raw: dict[str, Any], raw_link: str) -> str:
    """The whole of docs/benchmarks/scale.md for ``raw``, whose file is at ``raw_link`` from the report."""
    fmt = need(raw, "format")
    if fmt != FORMAT:
        raise MissingFigure(f"raw results in format {fmt}, this report reads format {FORMAT}")
    results: dict[str, list[dict]] = need(raw, "results")
    per_scenario = [
        f"{label} {sum(need(run, 'wall_s') for run in runs) / 60:.1f} min" for label, runs in results.items()
    ]
    out = [
        "# Speed at scale",
        "",
        f"<!-- Written by benchmarks/scale.py from {raw_link}; do not edit: regenerate instead. -->",
        "",
        "Every figure in this file is read from the raw results of one run of `benchmarks/scale.py`, kept",
        f"beside it ([{raw_link}]({raw_link})); none is written by hand. Earlier measurements, with the",
        "commit each was measured on, are in [scale-history.md](scale-history.md). Reproduce (a fresh",
        "checkout; the `bench` extra brings the simulator and kopf):",
        "",
        "```bash",
        "python3 -m venv .venv && .venv/bin/pip install -q -e '.[bench]'",
        ".venv/bin/python benchmarks/scale.py all",
        "```",
        "",
        "How long it took this time, per scenario (the sum of its runs' `wall_s`): " + ", ".join(per_scenario) + ".",
        f"`benchmarks/scale.py report --raw docs/benchmarks/{raw_link}` writes this file again from the raw results.",
        "",
        "## This run",
        "",
        *header(raw, raw_link),
        "",
        "## Results",
        "",
        "| scenario | workload | result | target | met |",
        "|---|---|---|---|---|",
        *(summarize(label, runs) for label, runs in results.items()),
        *peer_rows(results),
        "",
        *standing(results),
        "",
        *apf_rows(raw),
        "## How it measures",
        "",
        METHOD_TEMPLATE.format(failover=FAILOVER_METHOD),
        "",
    ]
    text = "\n".join(_squeeze(out))
    return text


def _squeeze(lines: Iterable[str]) -> list[str]:
    """No two blank lines in a row (a section with nothing to say leaves none)."""
    out: list[str] = []
    for line in lines:
        if line == "" and out and out[-1] == "":
            continue
        out.append(line)
    return out
