from scheduler import job


@job(cron="0 * * * *", name="twin")
def first() -> None:
    pass
