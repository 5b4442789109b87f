from scheduler import job
from scheduler.alerting import Webhook


@job(cron="* * * * *", name="paged", on={"failed": Webhook("hooks.example.com/x")})
def paged() -> None:
    pass
