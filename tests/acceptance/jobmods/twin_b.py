from scheduler import job


@job(cron="30 * * * *", name="twin")
def second() -> None:
    pass
