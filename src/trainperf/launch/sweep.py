"""Sweeps: many cases, each measured in several independent runs whose order is shuffled.

A sweep (one execution of a suite, or of the cases of one command line) gives every case
the runs its run policy asks for (trainperf.measure.runs); each run is a fresh worker
process (trainperf.launch.runner) measuring its share of the case's step budget. Every run is
stored the moment it ends, and a case's result (trainperf.case.result) the moment its
last run ends; a failed run (oom, crash, timeout, error) ends its case with that failure.

**Order.** The runs go in rounds: each round gives one run to every case that still wants
one, in an order drawn from a generator seeded with the sweep's ``order_seed`` (stored
with the sweep). A machine that slowly heats up or gets busier then spreads over all the
cases instead of lining up with one of them: the randomized multiple interleaved trials
of Abedi & Brecht (ICPE 2017). In the first round, cases that differ only in their batch
size keep ascending batch order among the places the shuffle gave them, so that a batch
that runs out of memory comes first and the larger ones are skipped, not tried.

**Skips.** A case excluded by the suite or needing absent hardware, or a larger batch of a
case that already ran out of memory, is recorded as ``skipped`` with the reason. A skip is
a fact about the system and the suite, not a measurement: when the store already holds one
for the case (same system, suite version and case key) with the same reason, the sweep
takes it as it takes an ok result, so rerunning a suite adds no second ``skipped`` row,
with ``--fresh`` too (it measures again; a skip has nothing to measure). A skip for
another reason is stored as new.

**Resume.** With a suite (name, version), a case that already has an ok result for this
system and suite version is taken from the store (``--fresh`` measures again), and a case
whose sweep was interrupted keeps its stored runs: with 2 of 3 runs done it needs 1 more.
Nothing measured is measured twice; a run cut short by the interruption is not stored.

**Concurrent sweeps.** Several sweeps of one suite on one database (two identical
``trainperf run suite.yaml`` at once) share its cases out: a sweep that resumes takes a
case's lease (trainperf.store.lease) before its first run, renews it before each run, and gives
it up with the result. A case leased by another live sweep is passed over and tried again
next round; when only such cases are left, the sweep waits (``lease.POLL_S``) and then
takes their results. The lease of a sweep that died is taken over, with the runs it
stored. ``--fresh`` sweeps and cases spanning nodes take no lease.

**A database that cannot be written.** A write that finds the database locked by another
process or the disk full waits, telling the display, and tries again, for a bounded time
(trainperf.store.database). Should that run out, nothing measured is lost: the sweep stops
before its next run and saves what it measured and could not store (runs, results, a largest-batch
search) in a recovery file that ``trainperf import`` adds later (trainperf.store.recovery);
``SweepOutcome.not_stored`` says where. A sweep that cannot even register itself measures
nothing: ``run_sweep`` raises ``StoreUnavailable``. A lease the sweep holds when its
database cannot be written is not given up (that would wait again): it lapses, as the lease
of a sweep that died does (``lease.is_live``).

**Several nodes.** A case that spans nodes runs the same runs on every node, and only the
node of rank 0 sees the measurements, so its runs are a fixed number (the policy's
minimum): the other nodes could not follow an adaptive decision. Every node must shuffle
alike: give them the same ``--order-seed`` (``trainperf run`` does when cases span nodes).
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from trainperf.case import result as case_result
from trainperf.case.outcome import FAILED_STATUSES, Outcome
from trainperf.case.spec import Case
from trainperf.launch.runner import Interrupted, StopFlag, job_directory, run_in_child
from trainperf.launch.sweep_items import Item, MaxBatchRequest, SweepItem
from trainperf.measure.runs import FixedRuns, RunsPolicy, parse_runs, share_steps
from trainperf.store import lease
from trainperf.store.access import StoreUnavailable
from trainperf.store.database import Store
from trainperf.store.lease import Owner
from trainperf.store.recovery import NotStored, Spool

FOLLOWER = "this node took part; the node of rank 0 stores the result"
T = TypeVar("T")


@dataclass
class SweepEvents:
    """Callbacks for progress display; all optional. ``on_start`` hears each run before it
    starts (the case's index, item, the run's number, and the runs still planned in the
    sweep, this one included); ``on_run`` each finished run; ``on_result`` each case's
    result; ``on_wait`` a case passed over because another sweep holds its lease (the
    case's index, item and that lease)."""

    on_start: Callable[[int, SweepItem, int, int], None] = lambda index, item, run, left: None
    on_probe: Callable[[int, Any], None] = lambda index, probe: None
    on_run: Callable[[int, dict[str, Any]], None] = lambda index, run: None
    on_result: Callable[[int, dict[str, Any]], None] = lambda index, result: None
    on_wait: Callable[[int, SweepItem, dict[str, Any]], None] = lambda index, item, held: None


@dataclass
class SweepOutcome:
    results: list[dict[str, Any]] = field(default_factory=list)  # in the order of the plan
    sweep_id: str | None = None
    order_seed: int | None = None
    interrupted: str | None = None  # signal name when the sweep stopped early
    exit_signal: int | None = None
    not_run: int = 0  # cases left without a result by the interruption or the database
    not_stored: NotStored | None = None  # when the database could not be written

    @property
    def failed(self) -> bool:
        return any(r["status"] in FAILED_STATUSES for r in self.results)

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self.results:
            counts[r["status"]] = counts.get(r["status"], 0) + 1
        return counts


@dataclass
class _CaseRuns:
    """A case of the running sweep: its policy, its ok runs so far, its result when done."""

    index: int
    item: Item  # a MaxBatchRequest until its batch is resolved
    policy: RunsPolicy
    runs: list[dict[str, Any]] = field(default_factory=list)
    spent_s: float = 0.0  # wall time of its runs, processes included
    followed: int = 0  # runs in which this node followed another's rank 0
    held: bool = False  # this sweep holds the case's lease
    result: dict[str, Any] | None = None

    @property
    def runs_left(self) -> int:
        return max(self.policy.planned - len(self.runs) - self.followed, 1)


@dataclass(frozen=True)
class _Sweep:
    """What every case of a running sweep shares."""

    store: Store
    system: dict[str, Any]
    sweep_id: str
    workdir: Path
    stop: StopFlag
    events: SweepEvents
    suite: tuple[str, str] | None
    rendezvous: str | None = None
    owner: Owner | None = None  # of this sweep's leases; None: it takes none
    spool: Spool = field(default_factory=Spool)  # writes once the database cannot take them
    skipped_before: dict[str, dict[str, Any]] = field(default_factory=dict)  # by case key


def run_cases(
    cases: Sequence[Case],
    store: Store,
    system: dict[str, Any],
    *,
    events: SweepEvents | None = None,
    label: str | None = None,
    order_seed: int | None = None,
) -> list[dict[str, Any]]:
    """Measure ``cases`` (each with its runs), storing each run and result at once."""
    items = [SweepItem(case) for case in cases]
    return run_sweep(
        items, store, system, events=events, label=label, order_seed=order_seed
    ).results


def new_order_seed() -> int:
    return random.SystemRandom().randrange(2**31)


def run_sweep(
    items: Sequence[Item],
    store: Store,
    system: dict[str, Any],
    *,
    suite: tuple[str, str] | None = None,
    fresh: bool = False,
    events: SweepEvents | None = None,
    label: str | None = None,
    rendezvous: str | None = None,
    order_seed: int | None = None,
    doctor: dict[str, Any] | None = None,
) -> SweepOutcome:
    """Run a sweep (see the module doc) and return its results in the order of ``items``.

    ``suite`` is (name, version): with it, finished cases and stored runs of this system
    and suite version are taken from the store (unless ``fresh``). ``rendezvous`` is the
    torchrun endpoint (HOST:PORT) of cases that span nodes; ``order_seed`` seeds the order
    of the runs (a fresh random one when None). ``doctor``: the verdict on the machine
    stored with the sweep (``trainperf.doctor.sweep_verdict`` of the store when None).
    ``StoreUnavailable`` when the sweep cannot be registered in ``store`` (nothing was
    measured).
    """
    events = events or SweepEvents()
    order_seed = new_order_seed() if order_seed is None else order_seed
    if doctor is None:
        from trainperf.doctor import sweep_verdict

        doctor = sweep_verdict(store.path)
    sweep_id = store.start_sweep(system, label, order_seed, doctor)
    outcome = SweepOutcome(sweep_id=sweep_id, order_seed=order_seed)
    resumable = suite is not None and not fresh
    done = store.finished(system["fingerprint"], suite[1]) if resumable else {}
    skipped = store.finished(system["fingerprint"], suite[1], status="skipped") if suite else {}
    states = [_CaseRuns(i, item, _policy(item.case)) for i, item in enumerate(items)]
    with job_directory() as tmp, StopFlag().installed() as stop:
        sweep = _Sweep(
            store, system, sweep_id, tmp, stop, events, suite, rendezvous, skipped_before=skipped
        )
        if resumable:  # see "Concurrent sweeps" in the module doc
            sweep = replace(sweep, owner=Owner.this_process(sweep_id))
        for state in states:
            _begin(state, sweep, done, resumable)
        try:
            _run_rounds(states, sweep, random.Random(order_seed))
        except Interrupted as exc:
            outcome.interrupted, outcome.exit_signal = str(exc), exc.signum
        except StoreUnavailable:
            if sweep.spool.cause is None:  # not one the spool took: not ours to handle
                raise
        finally:
            _let_go(sweep)
    outcome.results = [s.result for s in states if s.result is not None]
    outcome.not_run = sum(1 for s in states if s.result is None)
    if sweep.spool.cause is not None:
        outcome.not_stored = sweep.spool.save(sweep_id)
    return outcome


def _let_go(sweep: _Sweep) -> None:
    """End the sweep's leases (``Owner.done``) and give them up, unless the database could
    not be written: rather than waiting for it again, they are left to lapse
    (``lease.is_live``). A wait that runs out here leaves them so too, and hides no error
    on its way out."""
    if sweep.owner is not None:
        sweep.owner.done()
        if sweep.spool.cause is None:
            with contextlib.suppress(StoreUnavailable):
                sweep.store.release(sweep.owner)


def _write(sweep: _Sweep, write: Callable[[Store], T]) -> T:
    """``write`` to the sweep's database; once that cannot be written, to its spool (see
    "A database that cannot be written" in the module doc)."""
    if sweep.spool.store is None:
        try:
            return write(sweep.store)
        except StoreUnavailable as exc:
            sweep.spool.open(sweep.store, exc, sweep.system, sweep.sweep_id)
    return write(sweep.spool.store)


def _run_rounds(states: list[_CaseRuns], sweep: _Sweep, generator: random.Random) -> None:
    """Give runs in rounds until every case has its result (see "Order"), passing over
    the cases that another sweep is measuring, and waiting when only those are left."""
    first_round = True
    while waiting := [s for s in states if s.result is None]:
        ran = False
        for state in interleave(waiting, generator, keep_batch_order=first_round):
            if state.result is None:  # a run before may have skipped it
                sweep.stop.raise_if_set()
                if _claim(state, sweep):
                    _run_once(state, states, sweep)
                    ran = True
        first_round = False
        if not ran and any(s.result is None for s in states):
            _pause(sweep.stop, lease.POLL_S)


def _lease_key(state: _CaseRuns, sweep: _Sweep) -> tuple[str, str, str] | None:
    """What identifies the case among sweeps: (system, suite version, case key); None for
    a case that takes no lease (no suite or --fresh, or spanning nodes: every node of it
    must run it, in step)."""
    if sweep.owner is None or state.item.key is None or state.item.case.nodes > 1:
        return None
    return (sweep.system["fingerprint"], sweep.suite[1], state.item.key)


def _claim(state: _CaseRuns, sweep: _Sweep) -> bool:
    """Whether this sweep may give the case a run now: it holds the case's lease (taken
    or renewed here). On taking it, first take what another sweep left of the case: its
    result (the case is then finished) or its runs."""
    key = _lease_key(state, sweep)
    if key is None:
        return True
    holder = _write(sweep, lambda store: store.claim(key, sweep.owner))
    if holder is not None:
        sweep.events.on_wait(state.index, state.item, holder)
        return False
    if not state.held:
        state.held = True
        if found := sweep.store.finished(key[0], key[1], key[2]).get(key[2]):
            _finish(state, found | {"reused": True}, sweep)
        else:
            _take_stored_runs(state, sweep)
    return state.result is None


def _pause(stop: StopFlag, seconds: float) -> None:
    """Sleep ``seconds``, ending early (``Interrupted``) on a signal."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        stop.raise_if_set()
        time.sleep(min(left, 0.2))
    stop.raise_if_set()


def _policy(case: Case) -> RunsPolicy:
    policy = parse_runs(case.runs)
    if case.nodes > 1:  # see "Several nodes" in the module doc
        return FixedRuns(policy.planned)
    return policy


def interleave(
    states: Sequence[_CaseRuns], generator: random.Random, keep_batch_order: bool = False
) -> list[_CaseRuns]:
    """``states`` in a random order; with ``keep_batch_order``, the cases that differ only
    in batch size take the places the shuffle gave them in ascending batch order."""
    order = list(states)
    generator.shuffle(order)
    if keep_batch_order:
        places: dict[str, list[int]] = {}
        for place, state in enumerate(order):
            places.setdefault(_without_batch(state.item), []).append(place)
        for taken in places.values():
            members = sorted((order[p] for p in taken), key=lambda s: _batch_order(s.item))
            for place, state in zip(taken, members, strict=True):
                order[place] = state
    return order


def _batch_order(item: Item) -> tuple[int, int]:
    if isinstance(item, MaxBatchRequest):
        return (1, 0)  # after the numbers
    return (0, item.case.batch_size)


def _begin(
    state: _CaseRuns, sweep: _Sweep, done: dict[str, dict[str, Any]], resumable: bool
) -> None:
    """Finish a case that needs no run (reused, skipped); take the stored runs of one
    whose sweep was interrupted."""
    item = state.item
    if item.key in done:
        _finish(state, done[item.key] | {"reused": True}, sweep)
    elif item.skip_reason:
        _finish_skipped(state, item.skip_reason, sweep)
    elif resumable and item.key is not None and _lease_key(state, sweep) is None:
        _take_stored_runs(state, sweep)  # a leased case takes them with its lease (_claim)


def _take_stored_runs(state: _CaseRuns, sweep: _Sweep) -> None:
    """Take the runs of the case that an interrupted sweep stored; finish the case when
    they are enough."""
    fingerprint, item = sweep.system["fingerprint"], state.item
    state.runs = sweep.store.pending_runs(fingerprint, sweep.suite[1], item.key)
    state.spent_s = sum(r["metrics"].get("wall_s") or 0.0 for r in state.runs)
    if state.runs and (reason := state.policy.done(_estimates(state), state.spent_s)):
        if isinstance(item, MaxBatchRequest):
            state.item = item.resolved(state.runs[0]["case"]["batch_size"])  # as it ran
        _finish_ok(state, reason, sweep)


def _estimates(state: _CaseRuns) -> list[float]:
    return [case_result.run_estimate(r) for r in state.runs]


def _run_once(state: _CaseRuns, states: list[_CaseRuns], sweep: _Sweep) -> None:
    """One more run of ``state``'s case; finish the case when it needs no more."""
    if isinstance(state.item, MaxBatchRequest) and not _resolve(state, sweep):
        _skip_larger_batches(state, states, sweep)
        return
    sweep.spool.raise_if_open()  # a run measured now could not be stored
    case = state.item.case
    number = len(state.runs) + state.followed + 1
    left = sum(s.runs_left for s in states if s.result is None)
    sweep.events.on_start(state.index, state.item, number, left)
    one_run = case.model_copy(update={"steps": share_steps(case.steps, state.policy)})
    started = time.monotonic()
    run = run_in_child(one_run, sweep.workdir, sweep.stop, sweep.rendezvous)
    wall_s = time.monotonic() - started
    if run.get("follower"):
        state.followed += 1
        if state.followed >= state.policy.planned:
            result = Outcome.skipped(case.model_dump(), FOLLOWER).document()
            _finish(state, result | {"follower": True}, sweep)
        return
    run["run_number"] = number
    if run["status"] == "ok":
        run["metrics"]["wall_s"] = wall_s
    suite_version = sweep.suite[1] if sweep.suite else None
    run["uid"] = _write(
        sweep,
        lambda store: store.add_run(
            sweep.sweep_id,
            sweep.system["fingerprint"],
            run,
            suite_version=suite_version,
            case_key=state.item.key,
        ),
    )
    sweep.events.on_run(state.index, run)
    if run["status"] != "ok":
        result = Outcome.failed_run(case.model_dump(), state.runs, run).document()
        _finish(state, result | {"runs": [*state.runs, run]}, sweep)
        _skip_larger_batches(state, states, sweep)
        return
    state.runs.append(run)
    state.spent_s += wall_s
    if reason := state.policy.done(_estimates(state), state.spent_s):
        _finish_ok(state, reason, sweep)


def _finish_ok(state: _CaseRuns, reason: str, sweep: _Sweep) -> None:
    result = case_result.combine(state.item.case.model_dump(), state.runs, reason, state.policy)
    _add_achievable(result, sweep.store, sweep.system["fingerprint"])
    _finish(state, result | {"runs": state.runs}, sweep)


def _finish(state: _CaseRuns, result: dict[str, Any], sweep: _Sweep) -> None:
    """Store a new result (not a reused one, nor a follower's) and announce it."""
    if not result.get("reused") and not result.get("follower"):
        result["id"] = _write(
            sweep,
            lambda store: store.add_result(
                sweep.sweep_id,
                sweep.system["fingerprint"],
                result,
                suite=sweep.suite,
                case_key=state.item.key,
            ),
        )
        if sweep.spool.store is not None:
            result["id"] = None  # the spool's id: the database gives one on import
        result |= {"sweep_id": sweep.sweep_id, "system": sweep.system, "reused": False}
    result.setdefault("runs", [])
    state.result = result
    if state.held:
        key = _lease_key(state, sweep)
        _write(sweep, lambda store: store.release(sweep.owner, key))
        state.held = False
    sweep.events.on_result(state.index, result)


def _finish_skipped(state: _CaseRuns, reason: str, sweep: _Sweep) -> None:
    """Finish the case as skipped for ``reason``: the skip stored before for the same
    reason when there is one (see "Skips" in the module doc), else a new one."""
    before = sweep.skipped_before.get(state.item.key) if state.item.key else None
    if before is not None and (before.get("error") or {}).get("message") == reason:
        _finish(state, before | {"reused": True}, sweep)
    else:
        _finish(state, Outcome.skipped(state.item.fields, reason).document(), sweep)


def _resolve(state: _CaseRuns, sweep: _Sweep) -> bool:
    """Resolve the case's MaxBatchRequest into a SweepItem (the batch looked up or searched
    for); on a failure of the search, finish the case with it and return False."""
    request = state.item
    batch_size, failure = _resolve_max_batch(state.index, request, sweep)
    if failure:
        _finish(state, failure.document(), sweep)
        return False
    state.item = request.resolved(batch_size)
    return True


def _resolve_max_batch(
    index: int, request: MaxBatchRequest, sweep: _Sweep
) -> tuple[int, Outcome | None]:
    """The stored largest batch for the request's settings, searched for when absent."""
    from trainperf.launch import maxbatch

    template = request.case
    key = maxbatch.memory_key(template)
    store, fingerprint = sweep.store, sweep.system["fingerprint"]
    found = store.max_batch(fingerprint, key)
    if found is None:
        sweep.spool.raise_if_open()  # a search measured now could not be stored
        try:
            search = maxbatch.find_max_batch(
                template,
                sweep.workdir,
                stop=sweep.stop,
                on_probe=lambda probe: sweep.events.on_probe(index, probe),
            )
        except maxbatch.SearchFailed as exc:
            message = f"largest-batch search: {exc}"
            return 0, Outcome.unmeasured(request.fields, "error", message, "SearchFailed")
        _write(
            sweep,
            lambda store: store.add_max_batch(
                fingerprint,
                key,
                template.model_dump(),
                search.batch_size,
                [p.__dict__ for p in search.probes],
                search.note,
            ),
        )
        found = {"batch_size": search.batch_size, "note": search.note}
    if found["batch_size"] is None:
        message = found["note"] or "no batch size fits"
        return 0, Outcome.unmeasured(request.fields, "oom", message, "OutOfMemory")
    return found["batch_size"], None


def _add_achievable(result: dict[str, Any], store: Store, fingerprint: str) -> None:
    """Utilization against the best matmul rate `micro gemm` measured on this system, beside
    the MFU (against the catalog's training peak); absent (with the reason) when no such
    measurement is stored."""
    metrics = result.get("metrics") or {}
    if result["status"] != "ok" or "achieved_tflops" not in metrics:
        return
    case = result["case"]
    best = store.achievable_tflops(fingerprint, case["device"], case["precision"])
    if best is None:
        metrics["utilization_of_achievable"] = None
        metrics["achievable_absent_reason"] = (
            f"no `trainperf micro gemm --dtype {case['precision']}` result on this system"
        )
        return
    devices = metrics.get("device_count", 1)
    metrics["achievable_tflops"] = best
    metrics["utilization_of_achievable"] = metrics["achieved_tflops"] / (best * devices)


def _without_batch(item: Item) -> str:
    """The item's settings but its batch: cases equal in this differ in batch alone."""
    return item.case.model_dump_json(exclude={"batch_size"})


def _skip_larger_batches(state: _CaseRuns, states: list[_CaseRuns], sweep: _Sweep) -> None:
    """After ``state`` ran out of memory, skip the cases of the same setting with a larger
    batch that have not run yet."""
    result = state.result or {}
    batch = result.get("case", {}).get("batch_size")
    if result.get("status") != "oom" or not isinstance(batch, int):
        return
    setting = _without_batch(state.item)
    for other in states:
        if (
            other.result is None
            and not other.runs
            and isinstance(other.item, SweepItem)
            and other.item.case.batch_size > batch
            and _without_batch(other.item) == setting
        ):
            reason = f"batch {batch} of the same case already ran out of memory"
            _finish_skipped(other, reason, sweep)
