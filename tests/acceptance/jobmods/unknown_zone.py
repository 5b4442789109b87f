from scheduler import job


@job(cron="0 9 * * *", name="martian-morning", timezone="Mars/Olympus_Mons")
def nothing() -> None:
    pass
