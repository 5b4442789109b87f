from scheduler import job


@job(cron="61 * * * *", name="bad-minute")
def nothing() -> None:
    pass
