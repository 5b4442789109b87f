from scheduler import job


def page(event: object) -> None:
    pass


@job(cron="* * * * *", name="paged", on={"exploded": page})
def paged() -> None:
    pass
