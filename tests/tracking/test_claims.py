"""Claims (mcsa_bench.tracking.claims): of processes claiming one cell at once exactly one holds it,
a claim whose process is gone is taken over, a run that claims nothing counts as computing its cell."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time

import pytest

from mcsa_bench.tracking.claims import CLAIM_HELD, CLAIMANT_TAGS, claim_cell
from mcsa_bench.tracking.lifecycle import STALE_SECONDS, identity_tags
from mcsa_bench.tracking.record import CLAIM_TAG, CONFIG_HASH_TAG, HEARTBEAT_TAG, HOST_TAG, STALE_TAG
from mcsa_bench.tracking.writer import Retrying

CLAIMANTS = 6


def _claimant(uri: str, config_hash: str, start, results, decided) -> None:
    """A process of its own: a RUNNING run of the cell, claimed once every claimant is ready."""
    from mlflow.tracking import MlflowClient

    client = Retrying(MlflowClient(uri), 60.0)  # the store is locked now and then: retried as in a job
    run = client.create_run("0", tags={CONFIG_HASH_TAG: config_hash, **identity_tags(), **CLAIMANT_TAGS})
    start.wait()
    holder = claim_cell(client, "0", run.info.run_id, config_hash)
    results.put((run.info.run_id, None if holder is None else holder.info.run_id))
    decided.wait(120)  # alive until every claimant has decided (a claimant gone holds nothing)


@pytest.mark.parametrize("round_", range(2))
def test_of_processes_claiming_one_cell_at_once_exactly_one_holds_it(tmp_path, store_in, round_):
    """Issue 39: two identical resuming sweeps started at once ran 3 of 4 cells twice. Six processes
    claim one cell behind a barrier: one holds it, the five others are told it is that one."""
    import mlflow.tracking  # noqa: F401  (imported once, before the claimants are forked)

    uri = f"sqlite:///{store_in(tmp_path) / 'outputs' / 'mlflow.db'}"
    context = multiprocessing.get_context("fork")  # each makes its own client and database pool
    start, results, decided = context.Barrier(CLAIMANTS), context.Queue(), context.Event()
    processes = [context.Process(target=_claimant, args=(uri, f"cell{round_}", start, results, decided))
                 for _ in range(CLAIMANTS)]
    for process in processes:
        process.start()
    try:
        claims = [results.get(timeout=180) for _ in processes]
    finally:
        decided.set()
        for process in processes:
            process.join(timeout=60)
    holders = [run for run, holder in claims if holder is None]
    assert len(holders) == 1, claims
    assert {holder for _, holder in claims if holder is not None} == set(holders)


def _store(tmp_path, store_in):
    from mlflow.tracking import MlflowClient

    return Retrying(MlflowClient(f"sqlite:///{store_in(tmp_path) / 'outputs' / 'mlflow.db'}"), 60.0)


def _gone_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


@pytest.mark.parametrize("holder,stale", [
    ("this host, its process ended", True),
    ("another host, silent too long", True),
    ("another host, beating", False),
    ("this process, alive", False),
])
def test_a_claim_is_taken_over_only_once_its_process_is_gone(tmp_path, store_in, holder, stale):
    client = _store(tmp_path, store_in)
    tags = {**identity_tags(), CONFIG_HASH_TAG: "cell", CLAIM_TAG: CLAIM_HELD}
    if holder == "this host, its process ended":
        tags["mcsa_bench.pid"] = str(_gone_pid())
    elif holder.startswith("another host"):
        silent = STALE_SECONDS + 60 if holder.endswith("too long") else 0
        tags.update({HOST_TAG: "elsewhere", HEARTBEAT_TAG: str(time.time() - silent)})
    earlier = client.create_run("0", tags=tags).info.run_id
    claimant = client.create_run("0", tags={**identity_tags(), CONFIG_HASH_TAG: "cell", **CLAIMANT_TAGS}).info.run_id
    holder = claim_cell(client, "0", claimant, "cell")
    if stale:
        assert holder is None and client.get_run(claimant).data.tags[CLAIM_TAG] == CLAIM_HELD
        taken_over = client.get_run(earlier)
        assert taken_over.info.status == "KILLED" and STALE_TAG in taken_over.data.tags
    else:
        assert holder.info.run_id == earlier and client.get_run(earlier).info.status == "RUNNING"


def test_a_running_run_that_claims_nothing_computes_its_cell_and_other_cells_are_free(tmp_path, store_in):
    """A run without resume and checkpoints (or of an older mcsa-bench) claims nothing but computes its cell."""
    client = _store(tmp_path, store_in)
    unclaimed = client.create_run("0", tags={**identity_tags(), CONFIG_HASH_TAG: "cell"}).info.run_id
    claimant = client.create_run("0", tags={**identity_tags(), CONFIG_HASH_TAG: "cell", **CLAIMANT_TAGS}).info.run_id
    assert claim_cell(client, "0", claimant, "cell").info.run_id == unclaimed
    other = client.create_run("0", tags={**identity_tags(), CONFIG_HASH_TAG: "another", **CLAIMANT_TAGS}).info.run_id
    assert claim_cell(client, "0", other, "another") is None
    client.set_terminated(unclaimed, "FINISHED")  # a finished run holds nothing: resume checks for it apart
    assert claim_cell(client, "0", claimant, "cell") is None
    assert os.getpid() == int(client.get_run(claimant).data.tags["mcsa_bench.pid"])
