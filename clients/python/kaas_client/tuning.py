"""Asking a kaas service to tune problems, and following the request to its end.

    import kaas_client as kaas
    report = kaas.tune("http://host:8080", model=model, tokens=[1, 16], device_class="H200")
    print(report.table())          # per problem: served, baseline_faster, failed (or refused)

`POST /v1/tuning-requests` (docs/api.md) names the problems; the service answers at once
those its catalog already answers (a kernel that beats the baselines: `served`; a
measured faster baseline: `baseline_faster`) and queues a tune for each other one, shared
with anyone who asked for the same (problem, device class). A GPU worker of that class
searches, verifies and benchmarks it. This module only asks and watches: which kernel
serves a problem stays the service's decision.

Writes need a token (`token=` or `$KAAS_TOKEN`; `kaas token create` makes one where the
service runs). Standard library only; a progress bar uses tqdm where it is installed.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Union

from .errors import ApiError, KaasError
from .manifest import Problem, parse_problem
from .remote import request

# The states of a request's item (src/work/tune.rs): settled ones no longer change.
SETTLED = ("served", "baseline_faster", "failed", "refused")
# Problems one request may name by default (`TuneLimits::max_problems`); a larger list is
# sent as several requests.
MAX_PROBLEMS = 256
# How often the service's worker list is read again while problems wait.
WORKER_CHECK_S = 15.0
NO_WORKER = "queued, no worker"

ProblemLike = Union[Problem, str]


@dataclass
class Outcome:
    """Where one problem stands: `state` is the service's (`served`, `baseline_faster`,
    `failed`, `refused`, or, when the wait ended first, `queued`/`tuning`/`verifying`)."""

    problem: Problem
    state: str = "queued"
    reason: Optional[str] = None
    speedup: Optional[float] = None  # served: graph-mode speedup over cuBLASLt autotuned
    use_instead: Optional[dict] = None  # baseline_faster: the baseline to call
    kernel: Optional[str] = None  # served: the kernel's URL path
    queue_position: Optional[int] = None
    stage: Optional[str] = None
    request_id: Optional[int] = None

    @property
    def settled(self) -> bool:
        return self.state in SETTLED


@dataclass
class TuneReport:
    """What a tuning request came to, per problem, in the order asked."""

    source: str
    device_class: str
    outcomes: list = field(default_factory=list)  # Outcome
    request_ids: list = field(default_factory=list)
    seconds: float = 0.0
    timed_out: bool = False
    # No GPU worker of the class was seen by the service while problems waited.
    no_worker: bool = False

    @property
    def done(self) -> bool:
        return all(o.settled for o in self.outcomes)

    def counts(self) -> dict:
        out: dict = {}
        for o in self.outcomes:
            out[o.state] = out.get(o.state, 0) + 1
        return out

    def problems(self, state: str) -> list:
        return [o.problem for o in self.outcomes if o.state == state]

    def summary(self) -> str:
        """One line: the counts per state and, when the wait ended first, why."""
        counts = ", ".join(f"{n} {s}" for s, n in sorted(self.counts().items()))
        text = f"{len(self.outcomes)} problem(s) on {self.device_class}: {counts or 'none'}"
        if self.timed_out:
            waiting = sum(1 for o in self.outcomes if not o.settled)
            why = (f"{NO_WORKER} (no GPU worker for {self.device_class} has been seen by the service)" if self.no_worker
                   else "still open")
            text += f"; timed out after {self.seconds:.0f} s with {waiting} problem(s) {why}"
        return text

    def table(self) -> str:
        width = max([len(o.problem.path) for o in self.outcomes] + [7])
        lines = [f"{'problem':<{width}}  {'state':<16}  answer"]
        for o in self.outcomes:
            if o.state == "served":
                answer = (o.kernel or "") + (f" ({o.speedup:.3f}x cuBLASLt autotuned)" if o.speedup else "")
            elif o.state == "baseline_faster" and o.use_instead:
                u = o.use_instead
                answer = f"use {u.get('library')} ({u.get('layout')} layout), {u.get('median_us')} us"
            else:
                answer = o.reason or o.stage or ""
                if o.queue_position:
                    answer += f" (#{o.queue_position} in the queue)"
            lines.append(f"{o.problem.path:<{width}}  {o.state:<16}  {answer}".rstrip())
        return "\n".join(lines) + "\n"


def as_problems(problems: Iterable[ProblemLike], arch: str = "sm_90", acc: str = "f32") -> list:
    """Problems, from Problems or text (`tn/MxNxK`, `tn:MxNxK` or `sm_90/f32/tn/MxNxK`),
    deduplicated in order."""
    out: dict = {}
    for p in problems:
        q = p if isinstance(p, Problem) else parse_problem(str(p).replace(":", "/", 1), arch, acc)
        out.setdefault(q, None)
    return list(out)


def gather(problems: Optional[Iterable[ProblemLike]] = None, model: Any = None, tokens: Any = None,
           exclude: Iterable[str] = ()) -> list:
    """The problems given plus those of `model`'s fp16 linears at `tokens`, deduplicated."""
    todo = as_problems(problems or [])
    if model is not None:
        if tokens is None:
            raise KaasError("a model's problems need token counts: tokens=[1, 16, ...]")
        from .shapes import linear_problems
        todo += linear_problems(model, tokens, exclude=exclude)
    elif tokens is not None and not problems:
        raise KaasError("tokens= goes with model=")
    todo = list(dict.fromkeys(todo))
    if not todo:
        raise KaasError("nothing to tune: give problems, or a model and token counts")
    return todo


def local_device_class() -> Optional[str]:
    """This process's GPU's device class when torch is already imported and sees a GPU;
    None otherwise (importing torch just to ask would cost seconds)."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available():
            from .dispatch import device_class
            return device_class(torch.cuda.get_device_name())
    except Exception:  # a broken CUDA set-up: no class to offer, the caller names one
        return None
    return None


def base_url(source: str) -> str:
    if not str(source).startswith(("http://", "https://")):
        raise KaasError(f"`{source}` is not a service URL (http://host:port)")
    return str(source).rstrip("/")


def workers_for(base: str, device_class: str, timeout: float = 10.0) -> Optional[bool]:
    """Whether the service has seen a live GPU worker (idle or busy) of `device_class`
    lately (`GET /v1/health`, as `kaas request` reads it); None when it cannot say."""
    try:
        _, raw = request(f"{base}/v1/health", timeout=timeout)
        health = json.loads(raw)
    except ApiError as e:  # 503 when not ready: its body is the same view
        health = e.problem
    except (KaasError, ValueError):
        return None
    workers = health.get("workers") if isinstance(health, dict) else None
    if not isinstance(workers, list):
        return None
    return any(isinstance(w, dict) and w.get("state") in ("idle", "busy") and w.get("device_class") == device_class for w in workers)


class _Progress:
    """On a terminal, a tqdm bar where tqdm is installed, else one status line rewritten in
    place; elsewhere (a log) the status line, printed again only when it changes, since a
    bar redrawn every poll would fill the log."""

    def __init__(self, total: int, label: str):
        self.last = ""
        self.bar = None
        self.tty = hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
        try:
            from tqdm import tqdm
        except ImportError:
            tqdm = None
        if tqdm is not None and self.tty:
            self.bar = tqdm(total=total, desc=label, unit="problem", file=sys.stderr, dynamic_ncols=True)
        self.label = label
        self.total = total

    def update(self, settled: int, text: str) -> None:
        if self.bar is not None:
            self.bar.n = settled
            self.bar.set_postfix_str(text, refresh=False)
            self.bar.refresh()
            return
        line = f"{self.label}: {settled}/{self.total} settled ({text})"
        if line == self.last:
            return
        if self.tty:
            sys.stderr.write("\r" + line.ljust(len(self.last)))
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()
        self.last = line

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.tty and self.last:
            sys.stderr.write("\n")
            sys.stderr.flush()


def _status_text(report: TuneReport) -> str:
    counts = ", ".join(f"{n} {s}" for s, n in sorted(report.counts().items()))
    if report.no_worker and any(o.state == "queued" for o in report.outcomes):
        counts += f"; {NO_WORKER} for {report.device_class}"
    return counts


def _post(base: str, problems: list, device_class: Optional[str], token: str, timeout: float,
          refused: dict) -> Optional[dict]:
    """POSTs one request; a problem the service calls outside its limits (422 naming
    `problems[i]`) is taken out, recorded in `refused`, and the rest sent again. None when
    none is left."""
    todo = list(problems)
    while todo:
        body: dict = {"problems": [p.path for p in todo]}
        if device_class:
            body["device"] = device_class
        try:
            _, raw = request(f"{base}/v1/tuning-requests", body=body, token=token, timeout=timeout)
            return json.loads(raw)
        except ApiError as e:
            m = re.match(r"problems\[(\d+)\]", e.detail or "")
            if e.status == 422 and m and int(m.group(1)) < len(todo):
                refused[todo.pop(int(m.group(1)))] = e.detail
                continue
            if e.status == 401:
                raise ApiError(e.status, dict(e.problem, detail=(e.detail or "") + " (the token is missing, unknown or revoked)"), e.url) from None
            raise
    return None


def _apply(report: TuneReport, view: dict) -> None:
    by_path = {o.problem.path: o for o in report.outcomes}
    for item in view.get("items") or []:
        o = by_path.get(item.get("problem"))
        if o is None:
            continue
        o.request_id = view.get("id")
        o.state = str(item.get("state") or o.state)
        o.reason, o.stage = item.get("reason"), item.get("stage")
        o.speedup = item.get("speedup") if isinstance(item.get("speedup"), (int, float)) else None
        o.use_instead = item.get("use_instead") if isinstance(item.get("use_instead"), dict) else None
        o.kernel = item.get("kernel")
        o.queue_position = item.get("queue_position")
    if view.get("device_class"):
        report.device_class = str(view["device_class"])


def tune(source: str, problems: Optional[Iterable[ProblemLike]] = None, *, model: Any = None, tokens: Any = None,
         device_class: Optional[str] = None, token: Optional[str] = None, timeout: float = 3600.0, poll: float = 2.0,
         progress: Union[bool, Callable[[TuneReport], None]] = True, exclude: Iterable[str] = (),
         no_worker_timeout: float = 120.0, http_timeout: float = 30.0) -> TuneReport:
    """Asks the service at `source` to tune `problems` (and/or `model`'s fp16 linears at
    `tokens`) for `device_class` and follows the request until every problem is settled
    or `timeout` seconds pass. Returns a TuneReport: per problem `served`,
    `baseline_faster`, `failed` or `refused`, or, past the timeout, the state it waits in
    (`report.timed_out`; `report.no_worker` when the service has seen no GPU worker of
    the class: "queued, no worker"). With no such worker the wait ends after
    `no_worker_timeout` seconds instead: nothing moves until one starts.

    `device_class`: default this GPU's (when torch is imported and sees one), else the
    service's tuning class. `token`: default `$KAAS_TOKEN`. `progress`: a bar on stderr
    (tqdm where installed), False for none, or a callable given the report on each poll.
    Raises ServiceUnavailable when the service does not answer, UnknownDeviceError for a
    class it does not know, QuotaError when it refuses the request for a quota (nothing
    is queued then), ApiError for any other refusal."""
    base = base_url(source)
    todo = gather(problems, model, tokens, exclude)
    token = token or os.environ.get("KAAS_TOKEN")
    if not token:
        raise KaasError("tuning needs a token: pass token= or set KAAS_TOKEN (`kaas token create --name NAME` "
                        "where the service runs makes one)")
    device_class = device_class or local_device_class()
    started = time.monotonic()
    report = TuneReport(base, device_class or "", [Outcome(p) for p in todo])
    refused: dict = {}
    for i in range(0, len(todo), MAX_PROBLEMS):
        view = _post(base, todo[i:i + MAX_PROBLEMS], device_class, token, http_timeout, refused)
        if view is not None:
            report.request_ids.append(int(view["id"]))
            _apply(report, view)
            device_class = device_class or report.device_class  # the service's tuning class, for the next chunk
    for o in report.outcomes:
        if o.problem in refused:
            o.state, o.reason = "refused", refused[o.problem]
    bar = _Progress(len(todo), f"kaas tune on {report.device_class}") if progress is True else None
    deadline = started + timeout
    checked = -WORKER_CHECK_S
    idle_since: Optional[float] = None  # since when no worker of the class was seen
    try:
        while True:
            now = time.monotonic()
            if any(o.state == "queued" for o in report.outcomes) and now - checked >= WORKER_CHECK_S:
                report.no_worker = workers_for(base, report.device_class, http_timeout) is False
                checked = now
                idle_since = (idle_since or now) if report.no_worker else None
            if report.no_worker:
                for o in report.outcomes:
                    if o.state == "queued":
                        o.reason = f"{NO_WORKER}: no GPU worker for {report.device_class} has been seen by the service"
            report.seconds = now - started
            if bar is not None:
                bar.update(sum(o.settled for o in report.outcomes), _status_text(report))
            elif callable(progress):
                progress(report)
            if report.done:
                break
            end = deadline if idle_since is None else min(deadline, idle_since + no_worker_timeout)
            if now >= end:
                report.timed_out = True
                break
            time.sleep(max(0.0, min(poll, end - now)))
            for rid in report.request_ids:
                if all(o.settled for o in report.outcomes if o.request_id == rid):
                    continue
                _, raw = request(f"{base}/v1/tuning-requests/{urllib.parse.quote(str(rid))}", timeout=http_timeout)
                _apply(report, json.loads(raw))
    finally:
        if bar is not None:
            bar.close()
    report.seconds = time.monotonic() - started
    return report
