from scheduler import job


@job(cron="0 0 30 2 *", name="leap-dreams")
def nothing() -> None:
    pass
