"""The run path: what one node does with the periods it won, from claim to outcome.

The threads hand a run along like this (one `ActiveRun` per claim, kept by the
dispatcher until its outcome is settled):

    daemon loop / recovery / catch-up / requests
        │ Dispatcher.submit(claim)              phase WAITING; the lease watch learns
        ▼                                        until when the lease is surely ours
    starter thread ── store.writes.start ──▶ marks a batch running, one statement,
        │ says run_started for the batch,        as many as there are idle workers
        │ hands each run to an idle worker
        ▼
    worker thread (`run_*`) ── Executor.call ──▶ thread, event loop or child process
        │ Outcome                                phase RUNNING, then RECORDING
        ▼
    outcome writer thread ── store.writes.finish ──▶ outcomes that arrive together,
        │ Settled (WRITTEN / REFUSED / LOST)        fenced, one statement
        ▼
    Dispatcher._recorded: logs how the run ended; then, the batch's lines out,
    Dispatcher._end: ends the ActiveRun, starts the job's next waiting period

    heartbeat thread ── store.renewals ──▶ Dispatcher.renewed: deadlines forward
    lease watch thread ── deadline passed ──▶ Dispatcher.lose: cancel, kill the child

A job that runs on a task queue (`executor=celery(...)`) takes the same path up to the
starter, which marks it `queued` instead of `running` (`store.handoff`); a worker thread
then sends its one message (`remote.py`) and the run ends here. The worker's side,
`delivered.py`, starts it under the message's fence and holds it as a node would: the
fence, the lease and the outcome's row stay the same.
"""
