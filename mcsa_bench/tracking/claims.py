"""Claims: one process at a time computes a cell (a config hash), across processes and machines.

A job that resumes (``resume=true``) or writes checkpoints (``checkpoint_every``) claims its cell in the
store before it computes anything: two identical sweeps started at once would otherwise both run every
cell, and two identical runs with checkpoints would write one checkpoint file. The claim is the job's
own run: RUNNING, tagged with the config hash, the process's identity and its heartbeat
(:mod:`mcsa_bench.tracking.lifecycle`), so a claimant killed outright does not hold the cell for long:
as soon as :func:`~mcsa_bench.tracking.lifecycle.judge` finds its process gone (on its own host at once,
from another after :data:`~mcsa_bench.tracking.lifecycle.STALE_SECONDS` without a heartbeat), the next
claimant marks it KILLED and takes the cell over.

The protocol asks of the store only that a read sees every write committed before it (SQLite,
PostgreSQL, an MLflow server in front of either). A claimant announces itself (:data:`CLAIM_TAG` =
``pending`` on its run), then reads every RUNNING run of the cell. Of two claimants, the one that
announced later reads after the other's announcement, so at most one of the two reads no other claimant;
only that one takes the cell (``held``). A claimant that finds the cell computed already (a run that
holds it, or a RUNNING run that claims nothing: one without resume and checkpoints, or one of an older
mcsa-bench) loses; one that finds only other pending claimants withdraws and announces itself again
after a random pause, so one of them soon goes through alone.
"""

from __future__ import annotations

import itertools
import random
import time

from mcsa_bench.tracking.lifecycle import judge
from mcsa_bench.tracking.record import CLAIM_TAG, CONFIG_HASH_TAG, STALE_TAG

CLAIM_PENDING, CLAIM_HELD, CLAIM_WITHDRAWN = "pending", "held", "withdrawn"
#: a withdrawn claimant waits a random time up to this, times its attempts so far (at most 8), seconds
RETRY_PAUSE_SECONDS = 0.25


#: the tags a run that will claim its cell is created with: until it holds the cell it computes nothing
#: (created without, it would count as a run that claims nothing, computing its cell, to a claimant
#: reading between its creation and its claim)
CLAIMANT_TAGS = {CLAIM_TAG: CLAIM_PENDING}


def claim_cell(client, experiment_id: str, run_id: str, config_hash: str):
    """Claim the cell ``config_hash`` for the RUNNING run ``run_id``, created with :data:`CLAIMANT_TAGS`;
    returns None when the run holds it, else the run that computes it already. ``client`` retries
    transient store failures (writer.Retrying)."""
    for attempt in itertools.count(1):
        client.set_tag(run_id, CLAIM_TAG, CLAIM_PENDING)
        others = [run for run in live_runs_of_cell(client, experiment_id, config_hash) if run.info.run_id != run_id]
        computing = [run for run in others if run.data.tags.get(CLAIM_TAG) not in (CLAIM_PENDING, CLAIM_WITHDRAWN)]
        if computing:
            client.set_tag(run_id, CLAIM_TAG, CLAIM_WITHDRAWN)
            return computing[0]
        if not any(run.data.tags.get(CLAIM_TAG) == CLAIM_PENDING for run in others):
            client.set_tag(run_id, CLAIM_TAG, CLAIM_HELD)
            return None
        client.set_tag(run_id, CLAIM_TAG, CLAIM_WITHDRAWN)
        time.sleep(random.uniform(0, RETRY_PAUSE_SECONDS) * min(attempt, 8))


def live_runs_of_cell(client, experiment_id: str, config_hash: str) -> list:
    """The RUNNING runs of a cell whose processes are alive; a stale one is marked KILLED on the way
    (its claim taken over)."""
    live = []
    for run in client.search_runs([experiment_id], max_results=50_000, filter_string=(
            f"tags.`{CONFIG_HASH_TAG}` = '{config_hash}' and attributes.status = 'RUNNING'")):
        verdict = judge(run.data.tags)
        if verdict.stale:
            client.set_tag(run.info.run_id, STALE_TAG, verdict.reason)
            client.set_terminated(run.info.run_id, "KILLED")
        else:
            live.append(run)
    return live
